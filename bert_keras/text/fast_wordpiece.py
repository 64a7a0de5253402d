"""tf.text's `FastWordpieceTokenizer`, its model built once per process for each vocabulary
and options: tf.text builds the model on every construction (0.1 s for 30,522 tokens) and
copies it through a Python list of its bytes, and every loaded model or export constructs
tokenizers (a `BertTokenizer`'s construction: 0.26 CPU-s, 0.09 with the model built)."""

import functools

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.compat import fast_wordpiece_model


def fast_wordpiece_tokenizer(
    vocabulary, max_bytes_per_word, unknown_token, token_out_type, no_pretokenization=False, detokenize=False
):
    """`tf_text.FastWordpieceTokenizer(vocab=vocabulary, ...)` with "##" suffixes."""
    model = _fast_wordpiece_model(tuple(vocabulary), max_bytes_per_word, unknown_token, no_pretokenization, detokenize)
    # A constant of the current graph (eager, or the function being traced), as tf.text makes it.
    return tf_text.FastWordpieceTokenizer(token_out_type=token_out_type, model_buffer=tf.constant(model))


@functools.lru_cache(maxsize=16)
def _fast_wordpiece_model(vocabulary, max_bytes_per_word, unknown_token, no_pretokenization, detokenize):
    model = fast_wordpiece_model(
        list(vocabulary), max_bytes_per_word, "##", unknown_token, no_pretokenization, detokenize
    )
    return np.frombuffer(model, np.uint8)

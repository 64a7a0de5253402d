"""Raw text for the heads: a preprocessor matched to an encoder's vocabulary, and raw
inputs (strings, lists, arrays) told apart from packed ones and made into tensors."""

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.checkpoint.text_files import infer_lower_case
from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.text.tokenizer import BertTokenizer
from bert_keras.text.vocab import check_vocabulary


def preprocessor_for(encoder, vocab=None, lower_case=None, checkpoint=None, saved=None, **preprocessor_kwargs):
    """A `BertPreprocessor` for `encoder`'s vocabulary (the vocab.txt found beside its
    checkpoint unless `vocab` is given), checked against the checkpoint (named
    `checkpoint` in errors): `check_vocabulary`. `saved` is the `checkpoint.Checkpoint`
    the encoder was read from: its vocabulary and tokenizer settings, read already."""
    checkpoint = checkpoint or (Path(encoder.vocab_path).parent if encoder.vocab_path else "being used")
    own = encoder.vocab_path if saved is None else saved.vocabulary
    if vocab is None and own is None:
        raise ValueError(f"no vocab.txt beside the checkpoint {checkpoint}; pass vocab= (--vocab)")
    if vocab is None:  # the checkpoint's own
        vocab, saved_lower_case = own, None if saved is None else saved.tokenizer.lower_case
        check_vocabulary(vocab, encoder.config.vocab_size, checkpoint)
    else:
        saved_lower_case = None
        check_vocabulary(vocab, encoder.config.vocab_size, checkpoint, own)
    if lower_case is None:
        lower_case = infer_lower_case(vocab, saved_lower_case)
    return BertPreprocessor(BertTokenizer(vocab, lower_case=lower_case), **preprocessor_kwargs)


def is_packed(x):
    """Whether `x` (inputs, or a dataset element's inputs) is already a packed dict."""
    return isinstance(x, dict) and "input_word_ids" in x


def holds_strings(x):
    if isinstance(x, tf.data.Dataset):
        x = keras.utils.unpack_x_y_sample_weight(x.element_spec)[0]
    for leaf in tf.nest.flatten(x):
        if isinstance(leaf, (str, bytes)):
            return True
        if isinstance(leaf, (tf.TensorSpec, tf.RaggedTensorSpec, tf.Tensor, tf.RaggedTensor)):
            if leaf.dtype == tf.string:
                return True
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind in "USO":
            return True
    return False


def to_tensors(value):
    """Lists of strings / of lists become dense or ragged tensors that tf.data can slice."""
    if value is None or isinstance(value, (tf.Tensor, tf.RaggedTensor, np.ndarray)):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        lengths = {len(row) for row in value}
        return tf.constant(value) if len(lengths) == 1 else tf.ragged.constant(value)
    return np.asarray(value)


def segments_to_tensors(x):
    if isinstance(x, tuple):
        return tuple(to_tensors(segment) for segment in x)
    if isinstance(x, dict):
        return {key: to_tensors(value) for key, value in x.items()}
    return to_tensors(x)


def text_columns(texts):
    """Raw text for a head's `fit`/`predict` from one list of strings per segment: the
    one segment's array of strings, or a tuple of arrays for pairs."""
    columns = tuple(np.array(segment, dtype=object) for segment in texts)
    return columns[0] if len(columns) == 1 else columns


def one_pass(x, kwargs):
    """The arguments of Keras' `evaluate` or `predict` on `x` (with `kwargs`) that read it
    with one iterator. Given a dataset of a known number of batches, Keras' `EpochIterator`
    starts the next epoch's iterator as the pass ends, which these loops never read; reading
    a dataset of unknown length for `steps` batches, it starts none. Starting an iterator
    instantiates the pipeline's functions: a `predict` of 8 preprocessed texts took 0.46
    CPU-s, 0.24 this way (a tiny classifier, AMD EPYC)."""
    steps = kwargs.get("steps")
    batches = int(x.cardinality()) if steps is None and isinstance(x, tf.data.Dataset) else -1
    if batches >= 0:
        x, steps = x.filter(lambda *_: True), batches
    return {**kwargs, "x": x, "steps": steps}

"""What a pre-training run's masked LM answers on held-out text, for TensorBoard.

`FillMaskSummaries` runs the pretrainer after every held-out evaluation on a few held-out
instances and writes, as the markdown table `epoch_fill_mask` in the run's
`logs/<phase>/validation`, each instance as the model saw it (`[MASK]` where a word was
masked), the words it had to find and its top words with their probabilities.
"""

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.training.evaluation_summaries import markdown_table

FILL_MASK_TAG = "epoch_fill_mask"
TOP_K = 5


class FillMaskSummaries(keras.callbacks.Callback):
    """After each epoch, the pretrainer's `TOP_K` words at the masked positions of
    `instances` (one held-out batch: a dict of `input_word_ids`, `input_mask`,
    `input_type_ids`, `masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`, ...)
    as a text summary in `logs/validation`, on Keras' epoch step; `tokenizer` names the ids."""

    def __init__(self, instances, tokenizer, logs):
        super().__init__()
        self.instances = {name: np.asarray(values) for name, values in instances.items()}
        self.tokenizer, self.logs = tokenizer, Path(logs)
        self.writer = None

    def on_epoch_end(self, epoch, logs=None):
        logits = self.model(self.instances, training=False)["mlm_logits"]
        probabilities, ids = tf.math.top_k(tf.nn.softmax(tf.cast(logits, tf.float32)), k=TOP_K)
        if self.writer is None:
            self.writer = tf.summary.create_file_writer(str(self.logs / "validation"))
        with self.writer.as_default(step=epoch), tf.summary.record_if(True):
            tf.summary.text(FILL_MASK_TAG, self.table(ids.numpy(), probabilities.numpy()))
        self.writer.flush()

    def on_train_end(self, logs=None):
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def table(self, top_ids, top_probabilities):
        """The markdown rows: an instance's text on its first masked word's row, then one row a masked word."""
        vocabulary = self.tokenizer.vocabulary
        lengths = self.instances["input_mask"].sum(axis=-1)
        texts = self.tokenizer.detokenize(tf.RaggedTensor.from_tensor(self.instances["input_word_ids"], lengths))
        rows = []
        for row, text in enumerate(texts.numpy()):
            weights, answers = self.instances["masked_lm_weights"][row], self.instances["masked_lm_ids"][row]
            for slot in np.flatnonzero(weights > 0):
                words = ", ".join(
                    f"{vocabulary[i]} {p:.2f}" for i, p in zip(top_ids[row, slot], top_probabilities[row, slot])
                )
                rows.append((text.decode() if slot == 0 else "", vocabulary[answers[slot]], words))
        return markdown_table(("held-out text", "masked word", "top words"), rows)

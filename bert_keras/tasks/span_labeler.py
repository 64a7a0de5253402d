"""Extractive question answering (SQuAD): start and end logits for every token."""

import keras
import tensorflow as tf

from bert_keras.task import BertTask, default_optimizer, head_initializer

# Added to the logits of padding positions so that no answer can start or end there.
PADDING_LOGIT = -10000.0


@keras.saving.register_keras_serializable(package="bert_keras")
class BertSpanLabeler(BertTask):
    """Start/end logits per token from `sequence_output` through one new dense layer
    (2 units, stddev 0.02), as the original run_squad.

    No-answer (SQuAD v2.0) uses the original's convention: an unanswerable example is
    labelled start = end = 0, the [CLS] position, so the null score is
    `start_logits[:, 0] + end_logits[:, 0]`; no extra weights are needed.

    Args:
        encoder: a `BertEncoder`.
        preprocessor: optional `BertPreprocessor`; raw `(questions, contexts)` string
            pairs then work in predict (windowing of long contexts is the SQuAD
            pipeline's job).

    Call: packed dict of int `[B, L]` -> dict of float32 `start_logits` and
    `end_logits` `[B, L]`; padding positions get -10000.
    """

    def __init__(self, encoder, preprocessor=None, **kwargs):
        super().__init__(encoder, preprocessor, **kwargs)
        self.span_logits = keras.layers.Dense(
            2, kernel_initializer=head_initializer(encoder), dtype="float32", name="span_logits"
        )
        self.span_logits.build((None, None, encoder.config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        sequence = self._encode(inputs, training)["sequence_output"]
        logits = self.span_logits(sequence)
        padding = tf.cast(1 - tf.cast(inputs["input_mask"], tf.int32), logits.dtype) * PADDING_LOGIT
        return {"start_logits": logits[..., 0] + padding, "end_logits": logits[..., 1] + padding}

    def compile(self, optimizer="auto", loss="auto", loss_weights="auto", **kwargs):
        """Defaults: AdamW 5e-5 and the original loss, the mean of the start and end
        cross-entropies; labels are `{"start_logits": [B], "end_logits": [B]}` positions."""
        if optimizer == "auto":
            optimizer = default_optimizer()
        if loss == "auto":
            loss = {name: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                    for name in ("start_logits", "end_logits")}
        if loss_weights == "auto":
            loss_weights = {"start_logits": 0.5, "end_logits": 0.5}
        super().compile(optimizer=optimizer, loss=loss, loss_weights=loss_weights, **kwargs)

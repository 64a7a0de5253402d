"""Sentence and sentence-pair classification (and regression) from the [CLS] vector."""

import keras
import tensorflow as tf

from bert_keras.tasks.serving_signature import ServingSignature, as_float32, label_table
from bert_keras.tasks.task import BertTask, default_optimizer, output_layer


@keras.saving.register_keras_serializable(package="bert_keras")
class BertClassifier(BertTask):
    """`num_classes` logits from the pooled [CLS] vector, as the original run_classifier:
    dropout, then a new dense layer initialised with stddev 0.02.

    Args:
        encoder: a `BertEncoder`.
        num_classes: K; `1` makes it a regression head (STS-B), trained with MSE.
        dropout: on the pooled vector (the original uses 0.1).
        preprocessor: optional `BertPreprocessor` for raw text in fit/evaluate/predict
            (strings `[B]`, or a tuple `(text_a, text_b)` of them).

    Call: packed dict of int `[B, L]` -> float32 logits `[B, K]` (`[B, 1]` scores for
    regression).
    """

    def __init__(self, encoder, num_classes=2, dropout=0.1, preprocessor=None, **kwargs):
        super().__init__(encoder, preprocessor, **kwargs)
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = int(num_classes)
        self.dropout_rate = float(dropout)
        self.dropout = keras.layers.Dropout(dropout)
        self.logits = output_layer(encoder, num_classes, "logits")
        self.built = True

    def call(self, inputs, training=None):
        pooled = self._encode(inputs, training)["pooled_output"]
        return self.logits(self.dropout(pooled, training=training))

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Defaults: AdamW 5e-5; cross-entropy on logits and accuracy, or MSE for K=1."""
        regression = self.num_classes == 1
        if optimizer == "auto":
            optimizer = default_optimizer()
        if loss == "auto":
            loss = (
                keras.losses.MeanSquaredError()
                if regression
                else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            )
        if metrics == "auto":
            metrics = [] if regression else [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def serving_signature(self, preprocessor, labels=None):
        """Served: `logits`, `probabilities`, `label_ids` (and `labels` with class
        names), or `score` for regression (which has no labels)."""
        if self.num_classes == 1:
            return ClassifierSignature(self, preprocessor, None)
        table = label_table(labels, self.num_classes, f"a classifier of {self.num_classes} classes")
        return ClassifierSignature(self, preprocessor, table)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "dropout": self.dropout_rate}


class ClassifierSignature(ServingSignature):
    def from_ids(self, packed, run):
        logits = as_float32(run(packed))
        if self.model.num_classes == 1:
            return {"score": logits[:, 0]}
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        outputs = {"logits": logits, "probabilities": tf.nn.softmax(logits), "label_ids": label_ids}
        if self.label_table is not None:
            outputs["labels"] = tf.gather(self.label_table, label_ids)
        return outputs

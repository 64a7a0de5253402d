"""Sentence and sentence-pair classification (and regression) from the [CLS] vector."""

import keras
import tensorflow as tf

from bert_keras.checkpoint.weights import Transposed
from bert_keras.tasks.preprocessing import is_packed
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, label_names, label_table
from bert_keras.tasks.task import BertTask, default_optimizer, output_layer
from bert_keras.tasks.windowing import WINDOW_POOLING, encode_windows, is_windowed, pool_windows, window_arguments


@keras.saving.register_keras_serializable(package="bert_keras")
class BertClassifier(BertTask):
    """`num_classes` logits from the pooled [CLS] vector, as the original run_classifier:
    dropout, then a new dense layer initialised with stddev 0.02.

    Args:
        encoder: a `BertEncoder`.
        num_classes: K; `1` makes it a regression head (STS-B), trained with MSE.
        dropout: on the pooled vector (the original uses 0.1).
        multi_label: each class is a yes/no of its own (Hugging Face's
            `multi_label_classification`): sigmoid cross-entropy, served as per-class
            probabilities.
        preprocessor: optional `BertPreprocessor` for raw text in fit/evaluate/predict
            (strings `[B]`, or a tuple `(text_a, text_b)` of them).
        doc_stride: None truncates long texts (as the original); a number reads them in
            windows of the preprocessor's length, each `doc_stride` pieces after the last
            (run_squad's windows; for pairs the first text is repeated in each, the
            second windowed), in fit, evaluate, predict and the export.
        window_pooling: how a document's answer comes from its windows' logits, in
            training as in prediction: "mean" (their average: labels that hold for the
            whole text) or "max" (the highest logit of each class: evidence that sits in
            one window; the loss, taken per document, trains the window that holds it).
        max_windows: the most windows a document may have (None: no bound); beyond it
            is an error (INVALID_ARGUMENT from a served model).
        window_micro_batch: the most windows the encoder runs at once: a training step's
            memory is then set by it, whatever the documents' lengths, for the same
            gradient (recomputed in the backward pass). None: in training, each
            document's first window at once and the others as many as the batch's
            documents at a time (`windowing.encode_windows`); "all": every window at once.

    Call: packed dict of int `[B, L]` -> float32 logits `[B, K]` (`[B, 1]` scores for
    regression); windowed inputs `[B, W, L]` (`bert_keras.tasks.windowing`) -> the
    logits of each document pooled over its windows.
    """

    hf_architecture = "BertForSequenceClassification"
    window_argument_names = ("doc_stride", "window_pooling", "max_windows", "window_micro_batch")

    def __init__(
        self,
        encoder,
        num_classes=2,
        dropout=0.1,
        preprocessor=None,
        multi_label=False,
        doc_stride=None,
        window_pooling="mean",
        max_windows=None,
        window_micro_batch=None,
        **kwargs,
    ):
        super().__init__(encoder, preprocessor, **kwargs)
        self.doc_stride, self.max_windows, self.window_micro_batch = window_arguments(
            doc_stride, max_windows, window_micro_batch
        )
        if window_pooling not in WINDOW_POOLING:
            raise ValueError(f"window_pooling must be one of {WINDOW_POOLING}, got {window_pooling!r}")
        self.window_pooling = window_pooling
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        if multi_label and num_classes == 1:
            raise ValueError("a multi-label classifier needs more than one class; num_classes=1 is regression")
        self.num_classes = int(num_classes)
        self.multi_label = bool(multi_label)
        self.dropout_rate = float(dropout)
        self.dropout = keras.layers.Dropout(dropout)
        self.logits = output_layer(encoder, num_classes, "logits")
        self.built = True

    def call(self, inputs, training=None):
        if is_packed(inputs) and is_windowed(inputs):
            outputs, mask = encode_windows(
                self.encoder, inputs, training, outputs=("pooled_output",), micro_batch=self.window_micro_batch
            )
            logits = self.logits(self.dropout(outputs["pooled_output"], training=training))
            return pool_windows(logits, mask, self.window_pooling)
        pooled = self._encode(inputs, training)["pooled_output"]
        return self.logits(self.dropout(pooled, training=training))

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Defaults: AdamW 5e-5; cross-entropy on logits and accuracy, MSE for K=1, or
        sigmoid cross-entropy on `[B, K]` 0/1 targets for multi-label."""
        regression = self.num_classes == 1
        if optimizer == "auto":
            optimizer = default_optimizer()
        if loss == "auto":
            if regression:
                loss = keras.losses.MeanSquaredError()
            elif self.multi_label:
                loss = keras.losses.BinaryCrossentropy(from_logits=True)
            else:
                loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if metrics == "auto":
            if regression:
                metrics = []
            elif self.multi_label:
                metrics = [keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)]
            else:
                metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    @property
    def head_kind(self):
        """Its answer depends on its classes: regression (one), multi-label or classifier."""
        if self.num_classes == 1:
            return "regression"
        return "multi-label" if self.multi_label else "classifier"

    def serving_signature(self, preprocessor, labels=None):
        """Served: `logits`, `probabilities`, `label_ids` (and `labels` with class
        names), or `score` for regression (which has no labels); multi-label: `logits`,
        sigmoid `probabilities`, `predicted` 0/1 per class (and `labels`: each
        predicted class's name, "" for the others)."""
        if self.num_classes == 1:
            return ClassifierSignature(self, preprocessor, None)
        table = label_table(labels, self.num_classes, f"a classifier of {self.num_classes} classes")
        return ClassifierSignature(self, preprocessor, table)

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "dropout": self.dropout_rate,
            "multi_label": self.multi_label,
            "doc_stride": self.doc_stride,
            "window_pooling": self.window_pooling,
            "max_windows": self.max_windows,
            "window_micro_batch": self.window_micro_batch,
        }

    # --- checkpoints ------------------------------------------------------------------

    def head_weight_map(self):
        """run_classifier's `output_weights` [K, H] and `output_bias` (HF's `classifier`)."""
        return [(Transposed(self.logits.kernel), ["output_weights"]), (self.logits.bias, ["output_bias"])]

    @classmethod
    def head_arguments(cls, weights, head):
        """A run_classifier head (TF1) or a BertForSequenceClassification's: its classes,
        label names, and regression (one label) or multi-label from `problem_type`."""
        if "output_weights" not in weights or head["architecture"] not in (None, cls.hf_architecture):
            return None
        arguments = {"num_classes": int(weights["output_weights"].shape[0]), "labels": head["labels"]}
        if head["problem_type"] == "multi_label_classification":
            arguments["multi_label"] = True
        if arguments["num_classes"] == 1:
            arguments["labels"] = None  # a regression score has no class to name
        return arguments

    def checkpoint_head(self):
        if self.num_classes == 1:
            problem_type = "regression"
        else:
            problem_type = "multi_label_classification" if self.multi_label else "single_label_classification"
        return {
            "architecture": self.hf_architecture,
            "num_labels": self.num_classes,
            "labels": self.labels,
            "problem_type": problem_type,
        }


class ClassifierSignature(ServingSignature):
    def from_ids(self, packed, run):
        logits = as_float32(run(packed))
        if self.model.num_classes == 1:
            return {"score": logits[:, 0]}
        if self.model.multi_label:
            probabilities = tf.sigmoid(logits)
            outputs = {"logits": logits, "probabilities": probabilities, "predicted": tf.cast(logits > 0, tf.int32)}
            if self.label_table is not None:
                predicted = tf.where(logits > 0, tf.range(tf.shape(logits)[-1]), -1)
                outputs["labels"] = label_names(self.label_table, predicted)
            return outputs
        # A row of NaN logits (one an export refused) names no class: -1 and "".
        label_ids = tf.where(
            tf.reduce_all(tf.math.is_finite(logits), axis=-1), tf.argmax(logits, axis=-1, output_type=tf.int32), -1
        )
        outputs = {"logits": logits, "probabilities": tf.nn.softmax(logits), "label_ids": label_ids}
        if self.label_table is not None:
            outputs["labels"] = label_names(self.label_table, label_ids)
        return outputs

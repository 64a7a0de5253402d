"""Re-ranking with a cross-encoder: one relevance score per (query, document) pair read
together, the second stage after embedding retrieval, as sentence-transformers'
`CrossEncoder` (the ms-marco MiniLM family and the like).

`BertReranker` is a one-label `BertClassifier` over the packed pair with the activation
a CrossEncoder folder stores (sigmoid by default). It reads and writes CrossEncoder
folders, scores pairs (`predict`) and ranks documents (`rank`) as CrossEncoder does, and
trains with binary cross-entropy on labelled pairs or, given a positive and hard
negatives per query, with a list-wise softmax cross-entropy over them.
"""

import json
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras.checkpoint.hf import HF_CONFIG
from bert_keras.checkpoint.reader import read_checkpoint
from bert_keras.checkpoint.sentence_transformers import CROSS_ENCODER_ACTIVATIONS, activation_name
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.multiple_choice import pack_choices
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, check_no_labels

ACTIVATIONS = {"sigmoid": tf.sigmoid, "identity": tf.identity, "tanh": tf.tanh}


@keras.saving.register_keras_serializable(package="bert_keras")
class RerankerLoss(keras.losses.Loss):
    """Binary cross-entropy on the logits of labelled pairs (`[B, 1]` scores, labels
    0..1), or, for candidate lists (`[B, C]` logits, the positive first, `y` its index
    0), softmax cross-entropy over the candidates: the list-wise loss of re-rankers
    trained on a positive and hard negatives (Gao et al. 2021, "localized contrastive
    estimation")."""

    def __init__(self, name="reranker_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        y_pred = tf.cast(y_pred, tf.float32)
        if y_pred.shape[-1] == 1:
            labels = tf.reshape(tf.cast(y_true, tf.float32), tf.shape(y_pred))
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, y_pred), axis=-1)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.reshape(tf.cast(y_true, tf.int32), [-1]), y_pred)


@keras.saving.register_keras_serializable(package="bert_keras")
class BertReranker(BertClassifier):
    """A cross-encoder: `activation(logit)` of the pooled [CLS] vector of `[CLS] query
    [SEP] document [SEP]`.

    Args:
        encoder: a `BertEncoder`.
        activation: "sigmoid" (CrossEncoder's default for one label), "identity" or "tanh".
        dropout: on the pooled vector.
        preprocessor: a `BertPreprocessor` for raw text.

    Call: packed `[B, L]` -> logits `[B, 1]`; packed candidate lists `[B, C, L]` ->
    `[B, C]` (what the list-wise loss takes). `fit` takes `(queries, documents)` with
    0/1 (or graded 0..1) labels, or `(queries, positives, negatives)` with no `y`
    (`negatives` strings `[B]` or `[B, n]`, hard negatives).
    """

    text_input_names = ("query", "document")
    head_kind = "reranker"

    def __init__(self, encoder, activation="sigmoid", dropout=0.1, preprocessor=None, **kwargs):
        if kwargs.pop("num_classes", 1) != 1 or kwargs.pop("multi_label", False):
            raise ValueError("a BertReranker scores with one logit: num_classes is 1")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        kwargs.setdefault("segments", self.text_input_names)
        super().__init__(encoder, num_classes=1, dropout=dropout, preprocessor=preprocessor, **kwargs)
        self.activation = activation

    def call(self, inputs, training=None):
        if len(inputs["input_word_ids"].shape) != 3:
            return super().call(inputs, training)
        shape = tf.shape(inputs["input_word_ids"])
        flat = {name: tf.reshape(inputs[name], [-1, shape[2]]) for name in INPUT_NAMES}
        return tf.reshape(super().call(flat, training), shape[:2])

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Defaults: AdamW 5e-5 and `RerankerLoss` (pairs or candidate lists), no metrics."""
        loss = RerankerLoss() if loss == "auto" else loss
        super().compile(optimizer=optimizer, loss=loss, metrics=[] if metrics == "auto" else metrics, **kwargs)

    # --- raw text ------------------------------------------------------------------

    def text_segments(self, x, record=False):
        return self.segments  # a query and a document, whatever the training columns

    def preprocess_samples(self, x, y=None, sample_weight=None):
        """(queries, documents) -> packed pairs; (queries, positives, negatives...) or
        (queries, candidates `[B, C]`) -> packed lists `[B, C, L]`, `y` the positive's index 0."""
        columns = [tf.convert_to_tensor(column) for column in (x.values() if isinstance(x, dict) else x)]
        if len(columns) == 2 and columns[1].shape.rank == 1:
            return keras.utils.pack_x_y_sample_weight(self.preprocessor(tuple(columns)), y, sample_weight)
        candidates = tf.concat([c if c.shape.rank == 2 else c[:, None] for c in columns[1:]], axis=1)
        packed = pack_choices(self.preprocessor, (columns[0], candidates))
        if y is None:
            y = tf.zeros(tf.shape(columns[0])[:1], tf.int32)
        return keras.utils.pack_x_y_sample_weight(packed, y, sample_weight)

    def predict(self, x, batch_size=None, **kwargs):
        """Scores `[N]` (the activation of the logits) of `(queries, documents)` string
        columns, or of a list of (query, document) pairs, as `CrossEncoder.predict`."""
        if isinstance(x, list) and x and isinstance(x[0], (tuple, list)):
            x = tuple(np.asarray(column, dtype=object) for column in zip(*x))
        if isinstance(x, tuple) and len(x[0]) == 0:
            return np.zeros((0,), np.float32)
        logits = super().predict(x, batch_size=batch_size, **kwargs)
        return ACTIVATIONS[self.activation](np.asarray(logits, np.float32)[:, 0]).numpy()

    def rank(self, query, documents, top_k=None, return_documents=False, batch_size=32):
        """`documents` ranked for `query`, best first, as `CrossEncoder.rank`: a list of
        `{"corpus_id", "score"(, "text")}`, the first `top_k` (all when None)."""
        scores = self.predict(([query] * len(documents), list(documents)), batch_size=batch_size, verbose=0)
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:top_k]
        hits = [{"corpus_id": int(i), "score": float(scores[i])} for i in order]
        if return_documents:
            for hit in hits:
                hit["text"] = documents[hit["corpus_id"]]
        return hits

    # --- serving and checkpoints --------------------------------------------------------

    def serving_signature(self, preprocessor, labels=None):
        """Served from `query` and `document` strings: `scores` (activated) and `logits`."""
        check_no_labels(self, labels)
        return RerankerSignature(self, preprocessor)

    def get_config(self):
        return {**super().get_config(), "activation": self.activation}

    @classmethod
    def head_arguments(cls, weights, head):
        """A one-label BertForSequenceClassification's head (a CrossEncoder's)."""
        arguments = super().head_arguments(weights, head)
        if arguments is None or arguments["num_classes"] != 1 or arguments.get("multi_label"):
            return None
        return {}

    @classmethod
    def from_checkpoint(
        cls, path, seq_length=None, max_seq_length=None, activation=None, format=None, revision=None, **kwargs
    ):
        """A reranker from a sentence-transformers CrossEncoder folder (its activation and
        max length: the tokenizer's `model_max_length`, else sentence_bert_config.json's;
        sigmoid by default), any one-label BertForSequenceClassification, or a new head on
        any encoder checkpoint; pairs are padded to the longest in each batch
        (`seq_length=None`), as CrossEncoder does. Other arguments as `BertTask.from_checkpoint`."""
        found = read_checkpoint(path, format, revision=revision)
        saved_activation, saved_length = None, None
        if found.format == "hf":
            saved_activation = activation_name(found.activation, found.path)
            saved_length = found.tokenizer.max_length or found.max_seq_length
        return super().from_checkpoint(
            found,
            seq_length=seq_length,
            max_seq_length=max_seq_length or saved_length,
            activation=activation or saved_activation or "sigmoid",
            **kwargs,
        )

    def save_checkpoint(self, path, format="hf"):
        """Writes a CrossEncoder folder (`format="hf"`: a one-label
        BertForSequenceClassification with its activation in config.json, vocab and
        tokenizer files) that `CrossEncoder(path)` loads with the same scores."""
        super().save_checkpoint(path, format)
        if format == "hf":
            config_file = Path(path) / HF_CONFIG
            values = json.loads(config_file.read_text(encoding="utf-8"))
            values.pop("problem_type", None)
            values["sentence_transformers"] = {"activation_fn": CROSS_ENCODER_ACTIVATIONS[self.activation]}
            config_file.write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")


class RerankerSignature(ServingSignature):
    def from_ids(self, packed, run):
        logits = as_float32(run(packed))[:, 0]
        return {"scores": ACTIVATIONS[self.model.activation](logits), "logits": logits}

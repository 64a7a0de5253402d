"""Token classification (tagging, NER): one label per WordPiece from `sequence_output`."""

import keras
import tensorflow as tf

from bert_keras.checkpoint import Transposed
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, label_table
from bert_keras.tasks.task import BertTask, default_optimizer, output_layer

IGNORE_LABEL = -1


@keras.saving.register_keras_serializable(package="bert_keras")
class BertTokenClassifier(BertTask):
    """`num_classes` logits for every token, as the paper's NER setup: dropout, then a
    new dense layer on each final hidden vector.

    Args:
        encoder: a `BertEncoder`.
        num_classes: number of tags K.
        dropout: on the sequence output (0.1 in the original).
        preprocessor: optional `BertPreprocessor`; with it, fit/evaluate/predict take
            pre-split words, ragged `[B, (words)]` strings, and word labels ragged
            `[B, (words)]` ints: each word is tokenized on its own and its label goes to
            its first piece; every other position gets `IGNORE_LABEL` (-1), which the
            default loss skips.

    Call: packed dict of int `[B, L]` -> float32 logits `[B, L, K]`. The prediction
    for a word is the one at its first piece (`word_start_positions`).
    """

    token_output_names = None  # its output is one per-token tensor
    hf_architecture = "BertForTokenClassification"

    def __init__(self, encoder, num_classes, dropout=0.1, preprocessor=None, **kwargs):
        super().__init__(encoder, preprocessor, **kwargs)
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = int(num_classes)
        self.dropout_rate = float(dropout)
        self.dropout = keras.layers.Dropout(dropout)
        self.logits = output_layer(encoder, num_classes, "logits", per_token=True)
        self.built = True

    def call(self, inputs, training=None):
        sequence = self._encode(inputs, training)["sequence_output"]
        return self.logits(self.dropout(sequence, training=training))

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """Defaults: AdamW 5e-5, cross-entropy over labelled positions only (label -1 is
        ignored and excluded from the mean)."""
        if optimizer == "auto":
            optimizer = default_optimizer()
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE_LABEL)
        if metrics == "auto":
            metrics = []
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def word_start_positions(self, words):
        """Words ragged `[B, (words)]` strings -> (packed inputs, ragged `[B, (words)]`
        int32 position of each word's first piece, -1 for a word that was truncated
        away or has no pieces)."""
        words = _as_ragged_words(words)
        pieces = self.preprocessor.tokenizer(words.flat_values)
        packed = self.preprocessor.packer(tf.RaggedTensor.from_row_splits(pieces, words.row_splits))
        counts = pieces.row_lengths()
        before = tf.cumsum(counts, exclusive=True)
        row_first = tf.gather(tf.concat([before, [tf.reduce_sum(counts)]], 0), words.row_starts())
        position = before - tf.gather(row_first, words.value_rowids()) + 1
        kept = tf.cast(tf.reduce_sum(packed["input_mask"], axis=1), tf.int64) - 2
        valid = (counts > 0) & (position <= tf.gather(kept, words.value_rowids()))
        position = tf.cast(tf.where(valid, position, -1), tf.int32)
        return packed, words.with_flat_values(position)

    def preprocess_samples(self, x, y=None, sample_weight=None):
        packed, positions = self.word_start_positions(x)
        if y is None:
            return keras.utils.pack_x_y_sample_weight(packed, None, sample_weight)
        y = _as_ragged_words(y)
        flat = positions.flat_values
        valid = flat >= 0
        indices = tf.stack([tf.cast(positions.value_rowids(), tf.int32), flat], axis=1)
        shape = tf.shape(packed["input_word_ids"])
        labels = (
            tf.scatter_nd(
                tf.boolean_mask(indices, valid),
                tf.boolean_mask(tf.cast(y.flat_values, tf.int32), valid) - IGNORE_LABEL,
                shape,
            )
            + IGNORE_LABEL
        )
        return keras.utils.pack_x_y_sample_weight(packed, labels, sample_weight)

    def serving_signature(self, preprocessor, labels=None):
        """Served from text: one tag per word of the original tokenizer (`tagger_outputs`);
        from ids: the per-token `logits`."""
        table = label_table(labels, self.num_classes, f"a tagger of {self.num_classes} tags")
        return TaggerSignature(self, preprocessor, table)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "dropout": self.dropout_rate}

    def head_weight_map(self):
        """`output_weights` [K, H] and `output_bias`, as run_classifier's (HF's `classifier`)."""
        return [(Transposed(self.logits.kernel), ["output_weights"]), (self.logits.bias, ["output_bias"])]

    @classmethod
    def head_arguments(cls, weights, head):
        """A BertForTokenClassification's head, or a TF1 checkpoint's `output_weights`."""
        if "output_weights" not in weights or head["architecture"] not in (None, cls.hf_architecture):
            return None
        return {"num_classes": int(weights["output_weights"].shape[0]), "labels": head["labels"]}

    def checkpoint_head(self):
        return {"architecture": self.hf_architecture, "num_labels": self.num_classes, "labels": self.labels}


class TaggerSignature(ServingSignature):
    def from_text(self, texts, run):
        return tagger_outputs(run, self.preprocessor, texts, self.label_table)

    def from_ids(self, packed, run):
        return {"logits": as_float32(run(packed))}


def _as_ragged_words(words):
    if isinstance(words, tf.RaggedTensor):
        return words.with_row_splits_dtype(tf.int64)
    raise TypeError(
        "BertTokenClassifier takes pre-split words (and word labels) as ragged [batch, (words)] "
        f"tensors or lists of lists, got {type(words).__name__}"
    )


def tagger_outputs(run, preprocessor, texts, label_table):
    """One tag per word of the text: the prediction at each word's first piece.

    Words are the original tokenizer's (whitespace and punctuation split). Outputs are
    padded to the batch's most words: `words` (text, "" as padding), `tag_ids` (-1 as
    padding), `tags` (with labels), `tag_probabilities` and `num_words`.
    """
    (text,) = texts
    tokenizer = preprocessor.tokenizer
    ids, starts, ends = tokenizer.tokenize_with_offsets(text)
    packed = preprocessor.packer([ids])
    logits = as_float32(run(packed))
    kept_pieces = tf.reduce_sum(packed["input_mask"], axis=1) - 2
    # Each word's first and last piece, as indices into the batch's flat pieces.
    words = tokenizer.words_from_pieces(ids, ids.with_flat_values(tf.range(tf.size(ids.flat_values, tf.int64))))
    first, last = _word_edge(words, first=True), _word_edge(words, first=False)
    word_first = first.with_flat_values(tf.gather(tf.ragged.range(ids.row_lengths()).flat_values, first.flat_values))
    in_window = word_first < tf.cast(kept_pieces, word_first.dtype)[:, None]
    word_first = tf.ragged.boolean_mask(word_first, in_window)
    word_start = tf.gather(starts.flat_values, tf.boolean_mask(first.flat_values, in_window.flat_values))
    word_end = tf.gather(ends.flat_values, tf.boolean_mask(last.flat_values, in_window.flat_values))
    rows = tf.cast(word_first.value_rowids(), tf.int32)
    positions = tf.stack([rows, tf.cast(word_first.flat_values, tf.int32) + 1], axis=1)
    word_probs = tf.nn.softmax(tf.gather_nd(logits, positions))
    tag_ids = word_first.with_flat_values(tf.argmax(word_probs, axis=-1, output_type=tf.int32))
    words = word_first.with_flat_values(
        tf.strings.substr(
            tf.gather(text, rows),
            word_start,
            word_end - word_start,
            unit="BYTE",
        )
    )
    outputs = {
        "words": words.to_tensor(default_value=""),
        "tag_ids": tag_ids.to_tensor(default_value=-1),
        "tag_probabilities": word_first.with_flat_values(tf.reduce_max(word_probs, axis=-1)).to_tensor(),
        "num_words": tf.cast(word_first.row_lengths(), tf.int32),
    }
    if label_table is not None:
        outputs["tags"] = tag_ids.with_flat_values(tf.gather(label_table, tag_ids.flat_values)).to_tensor(
            default_value=""
        )
    return outputs


def _word_edge(words, first):
    """[B, (words), (pieces)] -> [B, (words)]: each word's first or last piece value."""
    pieces = words.values
    index = pieces.row_starts() if first else pieces.row_limits() - 1
    return words.with_values(tf.gather(pieces.flat_values, index))

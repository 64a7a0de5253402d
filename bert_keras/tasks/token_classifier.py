"""Token classification (tagging, NER): one label per WordPiece from `sequence_output`.

Long texts (with `doc_stride`) are read in run_squad's windows, and each piece takes
its logits from the window where it has the most context (`max_context_windows`), in
training (so each word's label is learnt in that window only) as in prediction.
"""

import keras
import tensorflow as tf

from bert_keras.checkpoint.weights import Transposed
from bert_keras.tasks.serving_signature import ServingSignature, as_float32, label_table
from bert_keras.tasks.task import BertTask, default_optimizer, output_layer
from bert_keras.tasks.windowing import encode_windows, is_windowed, pack_windows, window_arguments, window_mask
from bert_keras.text.windows import max_context_windows

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
        doc_stride: None truncates long texts at the preprocessor's length (words past
            the cut are neither trained nor tagged); a number reads them whole, in
            windows of that length starting `doc_stride` pieces apart.
        max_windows: the most windows a text may have (None: no bound); more is an
            `InvalidArgumentError` (INVALID_ARGUMENT when served).
        window_micro_batch: the most windows the encoder runs at once: a training step's
            memory is then set by it, whatever the documents' lengths, for the same
            gradient (recomputed in the backward pass). None: in training, each
            document's first window at once and the others as many as the batch's
            documents at a time (`windowing.encode_windows`); "all": every window at once.

    Call: packed dict of int `[B, L]` -> float32 logits `[B, L, K]`; windowed `[B, W, L]`
    -> the document's logits `[B, T, K]`, laid out as one packed sequence: [CLS] at 0,
    piece i at i + 1 (from its max-context window), then the last window's [SEP] and
    padding (`document_logits`). The prediction for a word is the one at its first piece
    (`word_start_positions`); `tag` gives one tag per word.
    """

    token_output_names = None  # its output is one per-token tensor
    hf_architecture = "BertForTokenClassification"
    head_kind = "tagger"

    window_argument_names = ("doc_stride", "max_windows", "window_micro_batch")

    def __init__(
        self,
        encoder,
        num_classes,
        dropout=0.1,
        preprocessor=None,
        doc_stride=None,
        max_windows=None,
        window_micro_batch=None,
        **kwargs,
    ):
        super().__init__(encoder, preprocessor, **kwargs)
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = int(num_classes)
        self.dropout_rate = float(dropout)
        self.doc_stride, self.max_windows, self.window_micro_batch = window_arguments(
            doc_stride, max_windows, window_micro_batch
        )
        self.dropout = keras.layers.Dropout(dropout)
        self.logits = output_layer(encoder, num_classes, "logits", per_token=True)
        self.built = True

    def call(self, inputs, training=None):
        if not is_windowed(inputs):
            sequence = self._encode(inputs, training)["sequence_output"]
            return self.logits(self.dropout(sequence, training=training))
        if self.doc_stride is None:
            raise ValueError("windowed inputs [batch, windows, seq] need a BertTokenClassifier with a doc_stride")
        return self.windowed_logits(inputs, self.doc_stride, training)

    def windowed_logits(self, inputs, doc_stride, training=None):
        """Windowed inputs made `doc_stride` apart -> the documents' logits (`document_logits`)."""
        sequence = encode_windows(
            self.encoder, inputs, training, outputs=("sequence_output",), micro_batch=self.window_micro_batch
        )[0]["sequence_output"]
        return document_logits(self.logits(self.dropout(sequence, training=training)), inputs, doc_stride)

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

    def word_start_positions(self, words, doc_stride=None):
        """Words ragged `[B, (words)]` strings -> (packed inputs, ragged `[B, (words)]`
        int32 position of each word's first piece, -1 for a word that was truncated
        away or has no pieces). With the model's `doc_stride` (or `doc_stride`) the inputs
        are windows and the positions are in the document (`document_logits`' layout),
        where no word is cut."""
        doc_stride = doc_stride or self.doc_stride
        words = _as_ragged_words(words)
        pieces = self.preprocessor.tokenizer(words.flat_values)
        word_pieces = tf.RaggedTensor.from_row_splits(pieces, words.row_splits)
        counts = pieces.row_lengths()
        before = tf.cumsum(counts, exclusive=True)
        row_first = tf.gather(tf.concat([before, [tf.reduce_sum(counts)]], 0), words.row_starts())
        position = before - tf.gather(row_first, words.value_rowids()) + 1
        if doc_stride is None:
            packed = self.preprocessor.packer(word_pieces)
            kept = tf.cast(tf.reduce_sum(packed["input_mask"], axis=1), tf.int64) - 2
            valid = (counts > 0) & (position <= tf.gather(kept, words.value_rowids()))
        else:
            packed = pack_windows(self.preprocessor.packer, word_pieces, doc_stride, self.max_windows).inputs
            valid = counts > 0
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
        if is_windowed(packed):
            shape = tf.stack([tf.shape(packed["input_word_ids"])[0], document_length(packed, self.doc_stride)])
        else:
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

    def tag(self, words, batch_size=32):
        """Tags of pre-split words, one per word however long the text: a list of words ->
        a list of tags; a list of such lists -> one list each. Tags are the label names
        (ids without `labels`). Long texts are read in windows `doc_stride` apart (without
        one: half a window apart), each word tagged from its max-context window."""
        if self.preprocessor is None:
            raise ValueError("BertTokenClassifier.tag needs a preprocessor (to tokenize the words)")
        single = not words or isinstance(words[0], str)
        texts = [list(words)] if single else [list(row) for row in words]
        packer = self.preprocessor.packer
        doc_stride = self.doc_stride or max(1, ((packer.seq_length or packer.max_seq_length) - 2) // 2)
        tags = []
        for start in range(0, len(texts), batch_size):
            batch = tf.ragged.constant(texts[start : start + batch_size], dtype=tf.string, row_splits_dtype=tf.int64)
            packed, positions = self.word_start_positions(batch, doc_stride)
            best = tf.argmax(self.windowed_logits(packed, doc_stride, training=False), axis=-1).numpy()
            for row, row_positions in enumerate(positions.to_list()):
                ids = [int(best[row, p]) if p >= 0 else None for p in row_positions]
                tags.append([i if i is None or self.labels is None else self.labels[i] for i in ids])
        return tags[0] if single else tags

    def serving_signature(self, preprocessor, labels=None):
        """Served from text: one tag per word of the original tokenizer (`tagger_outputs`);
        from ids: the per-token `logits`."""
        table = label_table(labels, self.num_classes, f"a tagger of {self.num_classes} tags")
        return TaggerSignature(self, preprocessor, table)

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "dropout": self.dropout_rate,
            "doc_stride": self.doc_stride,
            "max_windows": self.max_windows,
            "window_micro_batch": self.window_micro_batch,
        }

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
        windows = None if self.doc_stride is None else self.pack(texts)
        return tagger_outputs(run, self.preprocessor, texts, self.label_table, windows)

    def from_ids(self, packed, run):
        return {"logits": as_float32(run(packed))}


def _windows_of(inputs, doc_stride):
    """(starts, lengths) int64 `[B, W]` (0 for padding windows) of windowed `inputs`
    made `doc_stride` apart: each window holds its mask's pieces but [CLS] and [SEP],
    and the next starts `min(its length, doc_stride)` later (run_squad's rule)."""
    real = window_mask(inputs)
    lengths = tf.where(real, tf.reduce_sum(tf.cast(inputs["input_mask"], tf.int64), axis=2) - 2, 0)
    starts = tf.cumsum(tf.minimum(lengths, doc_stride), axis=1, exclusive=True)
    return tf.where(real, starts, 0), lengths


def document_length(inputs, doc_stride):
    """T of `document_logits` for windowed `inputs`: the last window's start + L."""
    starts, _ = _windows_of(inputs, doc_stride)
    return tf.cast(tf.reduce_max(starts) + tf.cast(tf.shape(inputs["input_mask"])[2], tf.int64), tf.int32)


def document_logits(window_logits, inputs, doc_stride):
    """Per-window logits `[B, W, L, K]` of windowed `inputs` -> each document's `[B, T, K]`
    as one packed sequence: position 0 is the first window's [CLS], position i + 1 piece
    i taken from the window where it has the most context (`max_context_windows`), the
    positions after the last piece the last window's [SEP] and padding (zeros beyond),
    T = `document_length`. A document of one window thus gets that window's logits."""
    starts, lengths = _windows_of(inputs, doc_stride)
    real = window_mask(inputs)
    num_pieces = tf.reduce_max(starts + lengths, axis=1)
    best = max_context_windows(tf.ragged.boolean_mask(starts, real), tf.ragged.boolean_mask(lengths, real), num_pieces)
    width = tf.shape(inputs["input_mask"], out_type=tf.int64)[2]
    length = tf.cast(document_length(inputs, doc_stride), tf.int64)
    position = tf.range(length)[None, :]  # [1, T]
    last = tf.reduce_sum(tf.cast(real, tf.int64), axis=1, keepdims=True) - 1
    best = best.to_tensor(default_value=0, shape=tf.stack([tf.shape(real, out_type=tf.int64)[0], length]))
    in_document = (position >= 1) & (position <= num_pieces[:, None])
    window = tf.where(in_document, tf.roll(best, 1, axis=1), tf.where(position == 0, tf.zeros_like(last), last))
    offset = position - tf.gather(starts, window, batch_dims=1)
    valid = offset < width
    logits = tf.gather_nd(window_logits, tf.stack([window, tf.minimum(offset, width - 1)], axis=-1), batch_dims=1)
    return tf.where(valid[:, :, None], logits, tf.zeros_like(logits))


def _as_ragged_words(words):
    if isinstance(words, tf.RaggedTensor):
        return words.with_row_splits_dtype(tf.int64)
    raise TypeError(
        "BertTokenClassifier takes pre-split words (and word labels) as ragged [batch, (words)] "
        f"tensors or lists of lists, got {type(words).__name__}"
    )


def tagger_outputs(run, preprocessor, texts, label_table, windows=None):
    """One tag per word of the text: the prediction at each word's first piece.

    Words are the original tokenizer's (whitespace and punctuation split). Outputs are
    padded to the batch's most words: `words` (text, "" as padding), `tag_ids` (-1 as
    padding), `tags` (with labels), `tag_probabilities` and `num_words`. Without
    `windows` (the texts' windowed inputs) words past the packed length are left out.
    """
    (text,) = texts
    tokenizer = preprocessor.tokenizer
    ids, starts, ends = tokenizer.tokenize_with_offsets(text)
    if windows is None:
        packed = preprocessor.packer([ids])
        kept_pieces = tf.reduce_sum(packed["input_mask"], axis=1) - 2
    else:
        packed, kept_pieces = windows, ids.row_lengths()
    logits = as_float32(run(packed))
    # Each word's first and last piece, as indices into the batch's flat pieces.
    words = tokenizer.words_from_pieces(ids, ids.with_flat_values(tf.range(tf.size(ids.flat_values, tf.int64))))
    first, last = _word_edge(words, first=True), _word_edge(words, first=False)
    word_first = first.with_flat_values(tf.gather(tf.ragged.range(ids.row_lengths()).flat_values, first.flat_values))
    kept = tf.gather(tf.cast(kept_pieces, word_first.dtype), word_first.value_rowids())
    in_window = word_first.with_flat_values(word_first.flat_values < kept)  # not ragged broadcasting: a smaller graph
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

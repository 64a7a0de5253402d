"""Long documents through the heads: windows packed as model inputs, the encoder run over
them, and their outputs pooled back to one per document.

Windowed inputs are the packed dict with one more axis: int32 `[B, W, L]`, W the batch's
most windows per document; a padding window has `input_mask` all zeros. A pair's first
segment is repeated in every window (kept as longest-first truncation keeps it) and only
the second is windowed, so each document's window budget is `max_seq_length - 3 - kept
first-segment length` (`max_seq_length - 2` for one segment). The windows themselves are
`bert_keras.text.windows`' (run_squad's rule). A document that fits one window is packed
exactly as without windows.

`pack_windows` (token ids) and `preprocess_windows` (raw text) make the inputs and return
where each window starts in its document, for heads that map pieces back (the tagger);
`encode_windows` runs the encoder on the real windows only (gather, encode, scatter back),
so padding windows cost nothing, and with a `micro_batch` on at most that many at a time,
in training too (gradients by recomputation, `models.recompute`), so a step's memory is
set by the micro-batch, not by the documents' lengths; `pool_windows` pools per-window
values per document.
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.models.recompute import recompute_gradient
from bert_keras.text.packer import balanced_lengths
from bert_keras.text.windows import split_windows, window_lengths

WINDOW_POOLING = ("mean", "max")


class PackedWindows(NamedTuple):
    """A batch of documents as windows.

    inputs: dict of int32 `[B, W, L]` (see the module).
    starts: int64 ragged `[B, (windows)]`: where each window starts in its document's
        windowed segment (the last one).
    lengths: int64 ragged `[B, (windows)]`: its pieces in each window.
    num_pieces: int64 `[B]`: the windowed segment's pieces.
    offset: int64 `[B]`: position in a packed window of the windowed segment's first piece.
    """

    inputs: dict
    starts: tf.RaggedTensor
    lengths: tf.RaggedTensor
    num_pieces: tf.Tensor
    offset: tf.Tensor


def is_windowed(inputs):
    """Whether packed `inputs` are windowed (`[B, W, L]`) rather than `[B, L]`."""
    return inputs["input_word_ids"].shape.rank == 3


def _as_ragged(segment):
    if not isinstance(segment, tf.RaggedTensor):
        segment = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(segment))
    if segment.ragged_rank > 1:
        segment = segment.merge_dims(1, -1)
    return segment.with_row_splits_dtype(tf.int64)


def pack_windows(packer, segments, doc_stride, max_windows=None):
    """Token-id segments (one or two ragged `[B, (pieces)]`, or `[B, (words), (pieces)]`)
    -> `PackedWindows` packed by `packer` (a `BertPacker`: its `seq_length`, or its
    `max_seq_length` when dynamic, is the window length). More than `max_windows`
    windows in a document is an `InvalidArgumentError` when the graph runs."""
    segments = [_as_ragged(segment) for segment in (segments if isinstance(segments, (list, tuple)) else [segments])]
    if len(segments) not in (1, 2):
        raise ValueError(f"windows are made for one text or a pair of texts, got {len(segments)} segments")
    length = packer.seq_length if packer.seq_length is not None else packer.max_seq_length
    document = segments[-1]
    if len(segments) == 1:
        budget = length - 2
        if budget < 1:
            raise ValueError(f"a window of {length} tokens leaves no room for text after [CLS] and [SEP]")
        offset = tf.ones_like(document.row_lengths())
        first = []
    else:
        lengths = tf.stack([segment.row_lengths() for segment in segments], axis=1)
        kept = balanced_lengths(lengths, tf.constant(length - 3, tf.int64))[:, 0]
        head = segments[0]
        index = tf.ragged.range(head.row_starts(), head.row_starts() + kept)
        first = [index.with_flat_values(tf.gather(head.flat_values, index.flat_values))]
        budget = length - 3 - kept
        offset = 2 + kept
    windows, starts = split_windows(document, budget, doc_stride)
    if max_windows is not None:
        check = tf.debugging.assert_less_equal(
            starts.row_lengths(),
            tf.constant(max_windows, tf.int64),
            message=f"a document needs more than max_windows={max_windows} windows",
        )
        with tf.control_dependencies([check]):
            starts = tf.identity(starts)
    owner = starts.value_rowids()
    flat = [tf.gather(segment, owner) for segment in first] + [windows.values]
    packed = packer.pack(flat, packer.seq_length)
    inputs = {
        name: tf.RaggedTensor.from_row_splits(packed[name], starts.row_splits).to_tensor(0) for name in INPUT_NAMES
    }
    return PackedWindows(
        inputs, starts, window_lengths(starts, document.row_lengths(), budget), document.row_lengths(), offset
    )


def preprocess_windows(preprocessor, texts, doc_stride, max_windows=None):
    """Raw text (a string tensor `[B]`, or a tuple/list/dict of two for pairs, as
    `BertPreprocessor` takes them) -> `PackedWindows`."""
    if isinstance(texts, dict):
        texts = [texts[key] for key in sorted(texts)]
    if not isinstance(texts, (list, tuple)):
        texts = [texts]
    tokens = [preprocessor.tokenizer(segment) for segment in texts]
    return pack_windows(preprocessor.packer, tokens, doc_stride, max_windows)


def window_mask(inputs):
    """bool `[B, W]`: which windows of windowed `inputs` are real (not padding)."""
    return inputs["input_mask"][:, :, 0] > 0


def encode_windows(encoder, inputs, training=None, outputs=("sequence_output", "pooled_output"), micro_batch=None):
    """The encoder over windowed `inputs` (`[B, W, L]`) -> (dict of the named `outputs`,
    each `[B, W, ...]`, zeros for padding windows; `window_mask` `[B, W]`). With
    `micro_batch` N, the encoder runs on at most N windows at once, and its gradient
    recomputes them as many at a time (the same gradient, about a third more compute).
    None: in training, each document's first window runs as unwindowed texts do and the
    others B at a time, recomputed (`_first_windows_whole`); in prediction all at once.
    "all": all of a batch's windows at once."""
    mask = window_mask(inputs)
    index = tf.where(mask)
    windows = [tf.gather_nd(inputs[name], index) for name in INPUT_NAMES]

    def encode(*windows):
        encoded = encoder(dict(zip(INPUT_NAMES, windows)), training=training)
        return [encoded[name] for name in outputs]

    if micro_batch is None and training:
        flat = _first_windows_whole(encode, encoder, windows, index, tf.shape(mask)[0])
    elif micro_batch not in (None, "all"):
        flat = recompute_gradient(encode, encoder, micro_batch)(*windows)
    else:
        flat = encode(*windows)
    flat = dict(zip(outputs, flat))
    batch_shape = tf.shape(mask, out_type=tf.int64)

    def scatter(value):
        shape = tf.concat([batch_shape, tf.shape(value, out_type=tf.int64)[1:]], axis=0)
        return tf.scatter_nd(index, value, shape)

    return {name: scatter(flat[name]) for name in outputs}, mask


def _first_windows_whole(encode, encoder, windows, index, documents):
    """`encode` over the real `windows` (at `index`, [document, window]): the first window
    of each of the batch's `documents` at once, its activations kept for the gradient as a
    batch of unwindowed texts' are, and the rest `documents` at a time, recomputed in the
    backward pass. A step of short documents (one window each) costs what it did unsplit;
    one of long documents holds about two batches' activations, whatever their lengths."""
    first = tf.cast(tf.where(tf.equal(index[:, 1], 0))[:, 0], tf.int32)
    rest = tf.cast(tf.where(index[:, 1] > 0)[:, 0], tf.int32)
    whole = encode(*[tf.gather(window, first) for window in windows])
    split = recompute_gradient(encode, encoder, documents)(*[tf.gather(window, rest) for window in windows])
    return [tf.dynamic_stitch([first, rest], [a, b]) for a, b in zip(whole, split)]


def pool_windows(values, mask, pooling="mean", weights=None):
    """Per-window `values` `[B, W, ...]` -> per-document `[B, ...]` over the real windows
    (`mask` `[B, W]`): "mean" (weighted by `weights` `[B, W]` if given) or "max"."""
    if pooling not in WINDOW_POOLING:
        raise ValueError(f"window pooling must be one of {WINDOW_POOLING}, got {pooling!r}")
    values, mask = tf.convert_to_tensor(values), tf.convert_to_tensor(mask)
    extra = values.shape.rank - 2
    mask = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([extra], tf.int32)], 0))
    if pooling == "max":
        lowest = tf.constant(values.dtype.min, values.dtype)
        return tf.reduce_max(tf.where(mask, values, lowest), axis=1)
    weights = tf.ones(tf.shape(mask)[:2], values.dtype) if weights is None else tf.cast(weights, values.dtype)
    weights = tf.reshape(weights, tf.shape(mask)) * tf.cast(mask, values.dtype)
    total = tf.reduce_sum(values * weights, axis=1)
    return total / tf.maximum(tf.reduce_sum(weights, axis=1), tf.constant(1e-9, values.dtype))


def window_arguments(doc_stride=None, max_windows=None, window_micro_batch=None):
    """Checked `doc_stride`, `max_windows` and `window_micro_batch` of a head: positive
    ints, or None (no windows: truncation; no bound on windows per document; in training,
    micro-batches of the batch's documents: `encode_windows`); `window_micro_batch` may
    also be "all" (all of a batch's windows at once)."""
    if window_micro_batch == "all":
        return (*window_arguments(doc_stride, max_windows)[:2], "all")
    arguments = (("doc_stride", doc_stride), ("max_windows", max_windows), ("window_micro_batch", window_micro_batch))
    for name, value in arguments:
        if value is not None and (isinstance(value, (bool, str)) or int(value) != value or value < 1):
            allowed = (
                'a positive integer, None or "all"' if name == "window_micro_batch" else "a positive integer or None"
            )
            raise ValueError(f"{name} must be {allowed}, got {value!r}")
    if max_windows is not None and doc_stride is None:
        raise ValueError("max_windows bounds the windows of doc_stride; set doc_stride too")
    return tuple(None if value is None else int(value) for _, value in arguments)


def truncated_pieces(preprocessor, texts, batch_size=1024):
    """The word pieces truncation without windows cuts from each of `texts` (strings, or
    a tuple of segments' strings): an int array, one count a text."""
    segments = [np.asarray(segment, dtype=object) for segment in (texts if isinstance(texts, tuple) else [texts])]
    dropped = []
    for start in range(0, len(segments[0]), batch_size):
        tokens = [preprocessor.tokenizer(tf.constant(segment[start : start + batch_size])) for segment in segments]
        dropped.append(preprocessor.packer.truncated_pieces(tokens).numpy())
    return np.concatenate(dropped) if dropped else np.zeros(0, np.int64)


class TruncationCounts(NamedTuple):
    """What truncation cut from a stream of texts, counted as it went (memory does not grow with it)."""

    texts: int = 0
    cut: int = 0  # the texts that lost pieces
    pieces: int = 0

    def add(self, dropped):
        """These counts with one text's `dropped` pieces added."""
        return TruncationCounts(self.texts + 1, self.cut + (dropped > 0), self.pieces + dropped)


def truncation_notice(preprocessor, texts, what="examples", batch_size=1024, dropped=None):
    """The line that says what truncation without windows cuts from `texts` (as
    `truncated_pieces`, or their counts `dropped` already known, per text or as
    `TruncationCounts`): how many of them lose pieces and how many pieces in all; None
    when nothing is cut."""
    if dropped is None:
        dropped = truncated_pieces(preprocessor, texts, batch_size)
    if not isinstance(dropped, TruncationCounts):
        dropped = np.asarray(dropped)
        dropped = TruncationCounts(len(dropped), int((dropped > 0).sum()), int(dropped.sum()))
    if not dropped.cut:
        return None
    length = preprocessor.packer.seq_length or preprocessor.packer.max_seq_length
    return (
        f"truncation: {dropped.cut} of {dropped.texts} {what} are longer than {length} tokens and lose "
        f"{dropped.pieces} "
        "word pieces in all (doc_stride / --doc-stride reads them in windows instead)"
    )

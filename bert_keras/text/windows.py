"""Sliding windows over long token sequences, as the original run_squad makes them.

A window holds up to `budget` pieces; when it does not reach the end of its document the
next one starts `min(window length, doc_stride)` pieces later (so windows overlap by
`budget - doc_stride` pieces); a document of 0 pieces has one empty window. A piece seen
by several windows is read from the one where it has the most context
(`_check_is_max_context`). Graph ops on ragged ids only, so the same code runs in
`tf.data` maps, in the train step's inputs and inside an exported serving graph.
"""

import tensorflow as tf


def _checked(budget, doc_stride):
    if isinstance(doc_stride, bool) or not isinstance(doc_stride, int) or doc_stride < 1:
        raise ValueError(f"doc_stride must be a positive integer, got {doc_stride!r}")
    if isinstance(budget, int):
        if budget < 1:
            raise ValueError(f"a window must hold at least one piece, got a budget of {budget}")
        return tf.constant(budget, tf.int64)
    budget = tf.cast(budget, tf.int64)
    check = tf.debugging.assert_positive(
        budget, message="a window must hold at least one piece: the first segment leaves no room"
    )
    with tf.control_dependencies([check]):
        return tf.identity(budget)


def window_starts(num_pieces, budget, doc_stride):
    """Start offset of each window in its document.

    Args:
        num_pieces: int `[B]` piece count of each document.
        budget: pieces one window holds: a Python int, or int `[B]` (one per document).
        doc_stride: a positive Python int.

    Returns: int64 ragged `[B, (windows)]`.
    """
    num_pieces = tf.cast(num_pieces, tf.int64)
    budget = tf.broadcast_to(_checked(budget, doc_stride), tf.shape(num_pieces))
    # Every window but the last holds `budget` pieces, so starts are multiples of the stride.
    stride = tf.minimum(budget, doc_stride)
    beyond = tf.maximum(num_pieces - budget, 0)
    count = 1 + (beyond + stride - 1) // stride
    return tf.ragged.range(tf.zeros_like(count), count * stride, stride)


def window_lengths(starts, num_pieces, budget):
    """Pieces in each window (ragged `[B, (windows)]` int64) of `window_starts`' windows."""
    num_pieces = tf.cast(num_pieces, tf.int64)
    budget = tf.broadcast_to(tf.cast(budget, tf.int64), tf.shape(num_pieces))
    rows = starts.value_rowids()
    flat = tf.minimum(tf.gather(num_pieces, rows) - starts.flat_values, tf.gather(budget, rows))
    return starts.with_flat_values(flat)


def split_windows(pieces, budget, doc_stride):
    """Ragged `[B, (pieces)]` -> `(windows, starts)`: windows ragged
    `[B, (windows), (pieces)]` and their starts (`window_starts`)."""
    pieces = pieces.with_row_splits_dtype(tf.int64)
    num_pieces = pieces.row_lengths()
    starts = window_starts(num_pieces, budget, doc_stride)
    lengths = window_lengths(starts, num_pieces, budget)
    first = tf.gather(pieces.row_starts(), starts.value_rowids()) + starts.flat_values
    index = tf.ragged.range(first, first + lengths.flat_values)
    windows = index.with_flat_values(tf.gather(pieces.flat_values, index.flat_values))
    return starts.with_flat_values(windows), starts


def max_context_windows(starts, lengths, num_pieces):
    """For each piece of each document, the index within its document of the window
    where the piece has the most context: the highest min(pieces to its left, pieces to
    its right in the window) + 0.01 * window length, the first such window on ties
    (run_squad's `_check_is_max_context`, computed in float64 as Python does).

    Args: `starts`, `lengths` ragged `[B, (windows)]`; `num_pieces` int `[B]`.
    Returns: int64 ragged `[B, (pieces)]`.
    """
    starts = starts.with_row_splits_dtype(tf.int64)
    lengths = tf.cast(lengths.with_row_splits_dtype(tf.int64), tf.int64)
    num_pieces = tf.cast(num_pieces, tf.int64)
    document = starts.value_rowids()
    document_first = tf.cumsum(num_pieces, exclusive=True)
    # Every (window, piece it holds) pair, with the window's number in its document.
    position = tf.ragged.range(lengths.flat_values)
    length = tf.gather(lengths.flat_values, position.value_rowids())
    offset = position.flat_values
    score = tf.cast(tf.minimum(offset, length - 1 - offset), tf.float64) + 0.01 * tf.cast(length, tf.float64)
    pair_window = position.value_rowids()
    number = tf.range(tf.size(document, out_type=tf.int64)) - tf.gather(starts.row_starts(), document)
    window = tf.gather(number, pair_window)
    piece = tf.gather(document_first, tf.gather(document, pair_window)) + tf.gather(starts.flat_values, pair_window)
    piece += offset
    total = tf.reduce_sum(num_pieces)
    best_score = tf.math.unsorted_segment_max(score, piece, total)
    is_best = tf.equal(score, tf.gather(best_score, piece))
    candidates = tf.where(is_best, window, tf.int64.max)
    best = tf.math.unsorted_segment_min(candidates, piece, total)
    return tf.RaggedTensor.from_row_lengths(best, num_pieces)

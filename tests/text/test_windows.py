"""Windows against a plain-Python transcription of the original run_squad's rule."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from run_squad_reference import check_is_max_context, run_squad_spans

from bert_keras.text.windows import max_context_windows, split_windows, window_lengths, window_starts

documents = st.lists(st.integers(0, 60), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(lengths=documents, budget=st.integers(1, 20), doc_stride=st.integers(1, 25))
def test_windows_follow_run_squad(lengths, budget, doc_stride):
    pieces = tf.ragged.constant([list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)], tf.int64)
    pieces = tf.RaggedTensor.from_row_lengths(pieces.flat_values, tf.constant(lengths, tf.int64))
    windows, starts = split_windows(pieces, budget, doc_stride)
    spans = [run_squad_spans(n, budget, doc_stride) for n in lengths]
    assert starts.to_list() == [[start for start, _ in doc] for doc in spans]
    expected = [[list(range(100 * i + s, 100 * i + s + n)) for s, n in doc] for i, doc in enumerate(spans)]
    assert windows.to_list() == expected
    lengths_tensor = window_lengths(starts, tf.constant(lengths), budget)
    assert lengths_tensor.to_list() == [[n for _, n in doc] for doc in spans]
    best = max_context_windows(starts, lengths_tensor, tf.constant(lengths)).to_list()
    for doc, chosen in zip(spans, best):
        for position, window in enumerate(chosen):
            assert check_is_max_context(doc, window, position)


@settings(max_examples=30, deadline=None)
@given(lengths=documents, budgets=st.lists(st.integers(1, 20), min_size=6, max_size=6), doc_stride=st.integers(1, 25))
def test_budget_per_document(lengths, budgets, doc_stride):
    """A pair's window budget depends on its first segment: one budget per document."""
    budgets = budgets[: len(lengths)]
    starts = window_starts(tf.constant(lengths), tf.constant(budgets), doc_stride)
    assert starts.to_list() == [
        [start for start, _ in run_squad_spans(n, b, doc_stride)] for n, b in zip(lengths, budgets)
    ]


def test_max_context_ties_go_to_the_first_window():
    """Squad's own implementation (used for SQuAD features) agrees, ties included."""
    from bert_keras.datasets.squad import _max_context_window

    for n, budget, stride in [(10, 4, 2), (9, 4, 1), (30, 7, 3), (12, 6, 6), (5, 5, 1)]:
        spans = run_squad_spans(n, budget, stride)
        starts = tf.ragged.constant([[s for s, _ in spans]], tf.int64)
        lengths = tf.ragged.constant([[length for _, length in spans]], tf.int64)
        ours = max_context_windows(starts, lengths, tf.constant([n])).to_list()[0]
        np.testing.assert_array_equal(ours, _max_context_window(spans, n))


def test_in_a_graph_with_a_budget_tensor():
    @tf.function(
        input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, 1, tf.int64), tf.TensorSpec([None], tf.int64)]
    )
    def windows(pieces, budget):
        return split_windows(pieces, budget, 2)[0].to_tensor()

    out = windows(tf.ragged.constant([[1, 2, 3, 4, 5], [6]], row_splits_dtype=tf.int64), tf.constant([3, 3], tf.int64))
    assert out.numpy().tolist() == [[[1, 2, 3], [3, 4, 5]], [[6, 0, 0], [0, 0, 0]]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least one piece"):
        windows(tf.ragged.constant([[1]], row_splits_dtype=tf.int64), tf.constant([0], tf.int64))


@pytest.mark.parametrize("budget, doc_stride", [(0, 1), (3, 0), (3, 1.5)])
def test_bad_arguments(budget, doc_stride):
    with pytest.raises(ValueError, match="budget|doc_stride"):
        window_starts(tf.constant([3]), budget, doc_stride)

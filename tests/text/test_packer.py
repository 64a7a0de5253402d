"""BertPacker: layout, truncation rules (against simulations of the original
rules), dynamic lengths, property tests and serialization."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_keras.text.packer import BertPacker

CLS, SEP, PAD = 101, 102, 0


def original_truncate(lengths, budget):
    """google-research/bert run_classifier `_truncate_seq_pair`, generalised to
    N segments: pop from the longest, ties to the later segment."""
    lengths = list(lengths)
    while sum(lengths) > budget:
        longest = max(lengths)
        index = max(i for i, length in enumerate(lengths) if length == longest)
        lengths[index] -= 1
    return lengths


def round_robin_truncate(lengths, budget):
    kept = [0] * len(lengths)
    while sum(kept) < budget and any(k < n for k, n in zip(kept, lengths)):
        for i, n in enumerate(lengths):
            if kept[i] < n and sum(kept) < budget:
                kept[i] += 1
    return kept


def waterfall_truncate(lengths, budget):
    kept = []
    for n in lengths:
        kept.append(min(n, budget))
        budget -= kept[-1]
    return kept


def expected_packing(segments, seq_length, truncate):
    kept = truncate([len(s) for s in segments], seq_length - 1 - len(segments))
    word_ids, type_ids = [CLS], [0]
    for index, (segment, n) in enumerate(zip(segments, kept)):
        word_ids += list(segment[:n]) + [SEP]
        type_ids += [index] * (n + 1)
    mask = [1] * len(word_ids)
    pad = seq_length - len(word_ids)
    return word_ids + [PAD] * pad, mask + [0] * pad, type_ids + [0] * pad


def ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1) if rows else tf.ragged.constant([[]], tf.int32)[:0]


def test_single_segment_layout():
    packed = BertPacker(seq_length=6)(ragged([[7, 8], [1, 2, 3, 4, 5, 6], []]))
    np.testing.assert_array_equal(
        packed["input_word_ids"], [[CLS, 7, 8, SEP, 0, 0], [CLS, 1, 2, 3, 4, SEP], [CLS, SEP, 0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(packed["input_mask"], [[1, 1, 1, 1, 0, 0], [1] * 6, [1, 1, 0, 0, 0, 0]])
    np.testing.assert_array_equal(packed["input_type_ids"], np.zeros([3, 6]))
    assert all(value.dtype == tf.int32 for value in packed.values())


def test_pair_layout_matches_original_run_classifier():
    a, b = [[1, 2, 3, 4, 5, 6, 7]], [[11, 12, 13]]
    packed = BertPacker(seq_length=8)([ragged(a), ragged(b)])
    # Budget 5: the original pops from a down to a tie at 3, then from b.
    np.testing.assert_array_equal(packed["input_word_ids"], [[CLS, 1, 2, 3, SEP, 11, 12, SEP]])
    np.testing.assert_array_equal(packed["input_type_ids"], [[0, 0, 0, 0, 0, 1, 1, 1]])


@pytest.mark.slow
@pytest.mark.parametrize(
    "truncation, rule",
    [("longest_first", original_truncate), ("round_robin", round_robin_truncate), ("waterfall", waterfall_truncate)],
)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_truncation_matches_rule(truncation, rule, data):
    num_segments = data.draw(st.integers(1, 4))
    batch = data.draw(st.integers(1, 4))
    seq_length = data.draw(st.integers(num_segments + 1, 24))
    segments = [
        [data.draw(st.lists(st.integers(1000, 2000), max_size=30)) for _ in range(batch)] for _ in range(num_segments)
    ]
    packed = BertPacker(seq_length=seq_length, truncation=truncation)([ragged(s) for s in segments])
    for row in range(batch):
        word_ids, mask, type_ids = expected_packing([s[row] for s in segments], seq_length, rule)
        np.testing.assert_array_equal(packed["input_word_ids"][row], word_ids)
        np.testing.assert_array_equal(packed["input_mask"][row], mask)
        np.testing.assert_array_equal(packed["input_type_ids"][row], type_ids)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(1000, 2000), max_size=70), min_size=1, max_size=6),
    multiple=st.sampled_from([1, 8, 16]),
)
def test_dynamic_length_pads_to_multiple(rows, multiple):
    packed = BertPacker(seq_length=None, max_seq_length=64, pad_to_multiple_of=multiple)(ragged(rows))
    longest = max(min(len(r), 62) + 2 for r in rows)
    expected = min(-(-longest // multiple) * multiple, 64)
    assert packed["input_word_ids"].shape == (len(rows), expected)
    np.testing.assert_array_equal(tf.reduce_sum(packed["input_mask"], axis=1), [min(len(r), 62) + 2 for r in rows])


def test_dynamic_length_buckets():
    packer = BertPacker(seq_length=None, max_seq_length=100, bucket_boundaries=[16, 32, 64])
    assert packer(ragged([[5] * 10]))["input_mask"].shape == (1, 16)
    assert packer(ragged([[5] * 14]))["input_mask"].shape == (1, 16)
    assert packer(ragged([[5] * 15]))["input_mask"].shape == (1, 32)
    assert packer(ragged([[5] * 70]))["input_mask"].shape == (1, 100)


def test_packed_inputs_consistent_for_huge_segments():
    huge = tf.RaggedTensor.from_row_lengths(tf.ones([300_000], tf.int32), [250_000, 50_000])
    packed = BertPacker(seq_length=128)([huge, huge[::-1]])
    assert packed["input_word_ids"].shape == (2, 128)
    np.testing.assert_array_equal(packed["input_mask"], np.ones([2, 128]))


def test_works_in_tf_data_and_tf_function():
    packer = BertPacker(seq_length=8)
    dataset = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1, 2], [3], [4, 5, 6]], tf.int32))
    dataset = dataset.ragged_batch(2).map(lambda ids: packer([ids, ids]))
    batches = list(dataset)
    assert [b["input_word_ids"].shape for b in batches] == [(2, 8), (1, 8)]
    np.testing.assert_array_equal(batches[0]["input_word_ids"][1], [CLS, 3, SEP, 3, SEP, 0, 0, 0])


def test_words_input_is_flattened_and_int64_accepted():
    words = tf.ragged.constant([[[1, 2], [3]], [[4]]], tf.int64)
    packed = BertPacker(seq_length=5)(words)
    np.testing.assert_array_equal(packed["input_word_ids"], [[CLS, 1, 2, 3, SEP], [CLS, 4, SEP, 0, 0]])


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="truncation"):
        BertPacker(truncation="longest")
    with pytest.raises(ValueError, match="bucket_boundaries"):
        BertPacker(bucket_boundaries=[64, 32])
    with pytest.raises(ValueError, match="no room"):
        BertPacker(seq_length=2)([ragged([[1]]), ragged([[2]])])
    with pytest.raises(ValueError, match="integer token ids"):
        BertPacker()(tf.ragged.constant([["a"]]))


def test_serialization_round_trip():
    packer = BertPacker(seq_length=None, truncation="waterfall", bucket_boundaries=[16, 32], pad_id=3)
    restored = keras.layers.deserialize(keras.layers.serialize(packer))
    assert isinstance(restored, BertPacker)
    assert restored.get_config() == packer.get_config()
    segments = [ragged([[5, 6, 7]]), ragged([[8]])]
    for key, value in packer(segments).items():
        np.testing.assert_array_equal(restored(segments)[key], value)

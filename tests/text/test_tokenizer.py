"""BertTokenizer against the original google-research/bert tokenizer.

The reference files hold the original `FullTokenizer`'s ids; random-text
property tests compare against a line-by-line port of the original algorithm
(`original_ids`, tests/original_tokenizer.py), on characters that Python's `unicodedata` assigns.
"""

import json
import unicodedata

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, SHARED, VOCAB_FILE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from original_tokenizer import original_ids

from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.text.tokenizer import BertTokenizer

pytestmark = pytest.mark.skipif(not VOCAB_FILE.exists(), reason=f"shared data folder {SHARED} is absent")


def read_reference(name):
    with open(REFERENCE / f"tokenization_{name}.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def vocabulary():
    with open(VOCAB_FILE, encoding="utf-8") as lines:
        return [line.strip() for line in lines]


@pytest.fixture(scope="module")
def uncased(vocabulary):
    return BertTokenizer(vocabulary, lower_case=True)


@pytest.fixture(scope="module")
def cased(vocabulary):
    return BertTokenizer(vocabulary, lower_case=False)


@pytest.fixture(scope="module")
def vocab_index(vocabulary):
    return {token: index for index, token in enumerate(vocabulary)}


def assert_matches_reference(tokenizer, lines):
    ids = tokenizer(tf.constant([line["text"] for line in lines])).to_list()
    mismatches = [(line, got) for line, got in zip(lines, ids) if got != line["ids"]]
    report = "\n".join(
        f"text: {line['text'][:200]!r}\n  expected: {line['tokens'][:40]}\n"
        f"  got:      {[tokenizer.vocabulary[i] for i in got][:40]}"
        for line, got in mismatches[:10]
    )
    agreement = 100.0 * (len(lines) - len(mismatches)) / len(lines)
    assert not mismatches, f"{agreement:.2f}% identical; first mismatches:\n{report}"


@pytest.mark.parametrize("name", ["uncased", "cased"])
def test_identical_ids_on_reference_file(name, request):
    lines = read_reference(name)
    assert len(lines) == 2733
    assert_matches_reference(request.getfixturevalue(name), lines)


def test_reference_file_in_tf_data_batches_and_scalars(uncased):
    lines = read_reference("uncased")[-40:]
    dataset = tf.data.Dataset.from_tensor_slices([line["text"] for line in lines]).batch(16).map(uncased)
    ids = [row for batch in dataset for row in batch.to_list()]
    assert ids == [line["ids"] for line in lines]
    assert uncased(tf.constant(lines[-1]["text"])).numpy().tolist() == lines[-1]["ids"]
    assert uncased(tf.constant([[lines[-1]["text"]]])).to_list() == [lines[-1]["ids"]]


@pytest.mark.slow
def test_tokenizers_of_one_vocabulary_trace_their_graph_once(vocabulary):
    """Each tf.data pipeline, predict function and export traced the tokenizer's graph
    again (0.23 CPU-s); tokenizers of one vocabulary and settings share one trace."""
    vocabulary = vocabulary + ["only-in-this-test"]  # a graph no other test has traced
    first, second, cased = BertTokenizer(vocabulary), BertTokenizer(list(vocabulary)), BertTokenizer(vocabulary, False)
    lines = read_reference("uncased")[-7:]
    texts = tf.constant([line["text"] for line in lines])
    expected = [line["ids"] for line in lines]
    for tokenizer in (first, second):
        assert tokenizer(texts).to_list() == expected
        batched = tf.data.Dataset.from_tensor_slices(texts).batch(4, drop_remainder=True).map(tokenizer)
        assert batched.element_spec.shape.as_list() == [4, None]  # a static batch stays static
        assert [row for batch in batched for row in batch.to_list()] == expected[:4]
        traced = tf.function(tokenizer).get_concrete_function(tf.TensorSpec([None], tf.string))
        assert traced(texts).to_list() == expected
    assert first._word_piece_graph is second._word_piece_graph
    assert first._word_piece_graph.tokenize_with_offsets.experimental_get_tracing_count() == 1
    assert cased._word_piece_graph is not first._word_piece_graph
    assert cased(texts).to_list() != expected  # the reference text has capitals


def test_offsets_point_at_the_input_bytes(uncased):
    lines = read_reference("uncased")
    texts = [line["text"] for line in lines]
    ids, starts, ends = uncased.tokenize_with_offsets(tf.constant(texts))
    for line, text, row_starts, row_ends in zip(lines, texts, starts.to_list(), ends.to_list()):
        data = text.encode("utf-8")
        assert row_starts == sorted(row_starts) and all(s < e <= len(data) for s, e in zip(row_starts, row_ends))
        for token, start, end in zip(line["tokens"], row_starts, row_ends):
            span = data[start:end].decode("utf-8").lower()
            span = "".join(c for c in unicodedata.normalize("NFD", span) if unicodedata.category(c) != "Mn")
            if token != "[UNK]":
                assert token.removeprefix("##") in span, (text, token, span)


def test_words_group_pieces(uncased):
    lines = read_reference("uncased")[:300]
    ids = uncased(tf.constant([line["text"] for line in lines]))
    words = uncased.words_from_pieces(ids)
    assert words.shape.rank == 3
    assert words.merge_dims(1, 2).to_list() == [line["ids"] for line in lines]
    for line, row in zip(lines, words.to_list()):
        assert len(row) == sum(not token.startswith("##") for token in line["tokens"])
    _, starts, _ = uncased.tokenize_with_offsets(tf.constant([lines[0]["text"]]))
    assert uncased.words_from_pieces(ids[:1], starts).merge_dims(1, 2).to_list() == starts.to_list()


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(
        st.text(st.characters(blacklist_categories=("Cs", "Cn")), max_size=40)
        | st.text(st.sampled_from("aAbΣσİé\u0301 .,-#\t\n\u00a0\u2028\u200b中ﬁＡ\x00\ufffdç"), max_size=30),
        min_size=1,
        max_size=8,
    )
)
def test_random_unicode_matches_original_algorithm(texts, uncased, cased, vocab_index):
    for tokenizer in (uncased, cased):
        ids = tokenizer(tf.constant(texts)).to_list()
        assert ids == [original_ids(text, vocab_index, tokenizer.lower_case) for text in texts]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.binary(max_size=60), min_size=1, max_size=8))
def test_random_bytes_never_crash(data, uncased):
    ids, starts, ends = uncased.tokenize_with_offsets(tf.constant(data))
    assert ids.nrows() == len(data)
    assert tf.reduce_all(ids.flat_values < uncased.vocabulary_size) and tf.reduce_all(ids.flat_values >= 0)
    assert tf.reduce_all(starts.flat_values < ends.flat_values)
    packed = BertPreprocessor(uncased, seq_length=16)(tf.constant(data))
    assert packed["input_word_ids"].shape == (len(data), 16)


def test_invalid_utf8_bytes_are_dropped_like_the_original(uncased):
    line = next(line for line in read_reference("uncased") if line["text"].startswith("Café au lait"))
    data = line["text"].encode("utf-8")
    # Invalid bytes inside words ("Ca|fé", "n|aïve"), an encoded surrogate and a
    # truncated sequence: dropping them leaves the original text.
    broken = b"\xff" + data[:2] + b"\xc3" + data[2:15] + b"\xed\xa0\x80" + data[15:] + b"\xe2\x82"
    assert uncased(tf.constant([broken, data])).to_list() == [line["ids"], line["ids"]]


def test_empty_strings(uncased):
    assert uncased(tf.constant(["", " \t\n", "\x00"])).to_list() == [[], [], []]
    packed = BertPreprocessor(uncased, seq_length=4)(tf.constant([""]))
    np.testing.assert_array_equal(packed["input_word_ids"], [[uncased.cls_id, uncased.sep_id, 0, 0]])


def test_long_words_become_unk_counted_in_characters(uncased, vocab_index):
    texts = ["x" * 200, "x" * 201, "ж" * 150, "ж" * 201, "ab " + "é" * 201 + " cd"]
    expected = [original_ids(text, vocab_index, True) for text in texts]
    assert uncased(tf.constant(texts)).to_list() == expected
    assert expected[1] == [uncased.unk_id] and len(expected[2]) > 1


def test_one_megabyte_string_is_capped_and_packed(vocabulary):
    line = read_reference("uncased")[0]
    repeats = 1_000_000 // len(line["text"]) + 1
    huge = line["text"] * repeats
    preprocessor = BertPreprocessor(BertTokenizer(vocabulary, max_input_bytes=4096), seq_length=128)
    packed = preprocessor(tf.constant([huge, line["text"]]))
    expected = (line["ids"] * repeats)[:126]
    np.testing.assert_array_equal(packed["input_word_ids"][0], [101] + expected + [102])
    full = BertTokenizer(vocabulary)(tf.constant([huge]))
    assert full.to_list()[0] == line["ids"] * repeats


def test_wrong_inputs_raise_clear_errors(uncased):
    with pytest.raises(TypeError, match="tf.string"):
        uncased(tf.constant([1, 2]))
    with pytest.raises(ValueError, match="shape"):
        uncased(tf.constant([["a", "b"], ["c", "d"]]))
    with pytest.raises(ValueError, match="not in the vocabulary"):
        BertTokenizer(["a", "b"])
    with pytest.raises(ValueError, match="vocabulary"):
        BertTokenizer([])


def test_special_tokens_and_lookups(uncased):
    assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id, uncased.mask_id) == (0, 100, 101, 102, 103)
    assert uncased.token_to_id("the") == 1996 and uncased.id_to_token(1996) == "the"
    assert uncased.token_to_id("not-a-token") == uncased.unk_id
    with pytest.raises(ValueError, match="outside the vocabulary"):
        uncased.id_to_token(10**6)
    # "[MASK]" typed in text is plain text, as in the original.
    line = next(line for line in read_reference("uncased") if line["text"].startswith("the [MASK] token"))
    assert uncased(tf.constant([line["text"]])).to_list() == [line["ids"]]


def test_detokenize_joins_pieces(uncased):
    lines = [line for line in read_reference("uncased")[:200] if "[UNK]" not in line["tokens"]]
    text = uncased.detokenize(tf.ragged.constant([line["ids"] for line in lines])).numpy()
    expected = [" ".join(line["tokens"]).replace(" ##", "").encode() for line in lines]
    assert text.tolist() == expected


def test_serialization_round_trip(vocabulary):
    tokenizer = BertTokenizer(str(VOCAB_FILE), lower_case=False, max_input_bytes=1000, name="wordpiece")
    config = tokenizer.get_config()
    assert config["vocabulary"] == vocabulary
    restored = keras.layers.deserialize(keras.layers.serialize(tokenizer))
    assert isinstance(restored, BertTokenizer) and restored.get_config() == config
    restored = BertTokenizer.from_config(config)
    lines = read_reference("cased")[-20:]
    assert restored(tf.constant([line["text"] for line in lines])).to_list() == [line["ids"] for line in lines]


def test_preprocessor_packs_pairs_like_the_original(uncased):
    lines = read_reference("uncased")
    a, b = lines[10], lines[2000]
    packed = BertPreprocessor(uncased, seq_length=32)((tf.constant([a["text"]]), tf.constant([b["text"]])))
    budget = 32 - 3
    kept_a, kept_b = len(a["ids"]), len(b["ids"])
    while kept_a + kept_b > budget:  # the original _truncate_seq_pair
        if kept_a > kept_b:
            kept_a -= 1
        else:
            kept_b -= 1
    expected = [101] + a["ids"][:kept_a] + [102] + b["ids"][:kept_b] + [102]
    np.testing.assert_array_equal(packed["input_word_ids"][0], expected + [0] * (32 - len(expected)))
    np.testing.assert_array_equal(packed["input_type_ids"][0], [0] * (kept_a + 2) + [1] * (kept_b + 1))
    by_key = BertPreprocessor(uncased, seq_length=32)({"b": tf.constant([b["text"]]), "a": tf.constant([a["text"]])})
    np.testing.assert_array_equal(by_key["input_word_ids"], packed["input_word_ids"])


def test_preprocessor_tf_hub_interface(uncased):
    lines = read_reference("uncased")[:4]
    preprocessor = BertPreprocessor(uncased)
    words = preprocessor.tokenize(tf.constant([line["text"] for line in lines]))
    assert words.shape.rank == 3 and words.merge_dims(1, 2).to_list() == [line["ids"] for line in lines]
    packed = preprocessor.bert_pack_inputs([words, words], seq_length=None)
    assert packed["input_word_ids"].shape[1] % 8 == 0
    np.testing.assert_array_equal(
        tf.reduce_sum(packed["input_mask"], axis=1), [2 * len(line["ids"]) + 3 for line in lines]
    )
    restored = keras.layers.deserialize(keras.layers.serialize(preprocessor))
    assert restored.get_config() == preprocessor.get_config()


def test_export_archive_serves_raw_strings_with_listed_ops_only(uncased, tmp_path):
    from bert_keras.text.tokenizer import NON_CORE_OPS

    preprocessor = BertPreprocessor(uncased, seq_length=24)
    archive = keras.export.ExportArchive()
    archive.track(preprocessor)
    archive.add_endpoint("serve", lambda text: preprocessor(text), input_signature=[tf.TensorSpec([None], tf.string)])
    archive.write_out(str(tmp_path / "export"), verbose=False)
    lines = read_reference("uncased")[-12:]
    served = tf.saved_model.load(str(tmp_path / "export")).serve(tf.constant([line["text"] for line in lines]))
    for row, line in zip(served["input_word_ids"].numpy().tolist(), lines):
        expected = [101] + line["ids"][:22] + [102]
        assert row[: len(expected)] == expected

    from tensorflow.core.protobuf import saved_model_pb2

    graph_ops = set()
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((tmp_path / "export" / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    graph_ops.update(node.op for node in graph.node)
    for function in graph.library.function:
        graph_ops.update(node.op for node in function.node_def)
    non_core = {op for op in graph_ops if not hasattr(tf.raw_ops, op)} - {
        f.signature.name for f in graph.library.function
    }
    assert non_core <= set(NON_CORE_OPS), non_core

"""Windowed model inputs: packed as the original packs a window (run_squad's spans, the
first segment repeated), equal to today's packing when a text fits, and the encoder run
on the real windows only."""

import numpy as np
import pytest
import tensorflow as tf
from harness import VOCAB, tiny_encoder, tiny_preprocessor
from run_squad_reference import run_squad_spans, truncated_pair_lengths

from bert_keras.tasks.serving_signature import word_pieces_outputs
from bert_keras.tasks.windowing import encode_windows, pack_windows, pool_windows, preprocess_windows

LONG = "the quick brown fox jumps over the lazy dog , the cat was good , it is a bad film ."
TEXTS = [LONG, "a dog", "", LONG + " " + LONG]


def ids(tokens):
    return [VOCAB.index(token) for token in tokens]


def test_texts_that_fit_are_packed_as_without_windows():
    for seq_length in (None, 32):
        preprocessor = tiny_preprocessor(seq_length=seq_length, max_seq_length=32)
        short = tf.constant(["the quick brown fox", "a dog", ""])
        windows = preprocess_windows(preprocessor, short, doc_stride=4)
        assert windows.starts.to_list() == [[0], [0], [0]]
        for name, value in preprocessor(short).items():
            np.testing.assert_array_equal(windows.inputs[name][:, 0], value)
        pair = (tf.constant(["who did go home", "a"]), tf.constant(["john lives in paris", "the cat"]))
        windows = preprocess_windows(preprocessor, pair, doc_stride=4)
        for name, value in preprocessor(pair).items():
            np.testing.assert_array_equal(windows.inputs[name][:, 0], value)


@pytest.mark.parametrize("pair", [False, True])
def test_windows_as_run_squad_packs_them(pair):
    max_seq_length, doc_stride = 12, 3
    preprocessor = tiny_preprocessor(max_seq_length=max_seq_length)
    tokenizer = preprocessor.tokenizer
    questions = ["who did go home ?", "where ?", "a", "the cat jumps over the lazy dog"]
    texts = (tf.constant(questions), tf.constant(TEXTS)) if pair else tf.constant(TEXTS)
    windows = preprocess_windows(preprocessor, texts, doc_stride)
    word_ids = windows.inputs["input_word_ids"].numpy()
    mask = windows.inputs["input_mask"].numpy()
    type_ids = windows.inputs["input_type_ids"].numpy()
    for row, text in enumerate(TEXTS):
        document = tokenizer(tf.constant([text]))[0].numpy().tolist()
        query = tokenizer(tf.constant([questions[row]]))[0].numpy().tolist() if pair else None
        if pair:  # the first segment keeps what truncation leaves it beside the document
            query = query[: truncated_pair_lengths(len(query), len(document), max_seq_length - 3)[0]]
        head = [tokenizer.cls_id] + (query + [tokenizer.sep_id] if pair else [])
        spans = run_squad_spans(len(document), max_seq_length - len(head) - 1, doc_stride)
        assert windows.starts[row].numpy().tolist() == [start for start, _ in spans]
        assert windows.offset[row] == len(head)
        for number, (start, length) in enumerate(spans):
            expected = head + document[start : start + length] + [tokenizer.sep_id]
            assert word_ids[row, number, : len(expected)].tolist() == expected
            assert mask[row, number].sum() == len(expected)
            assert type_ids[row, number].tolist() == [0] * len(head) + [1 if pair else 0] * (length + 1) + [0] * (
                max_seq_length - len(expected)
            )
        assert not mask[row, len(spans) :].any()  # padding windows


def test_word_pieces_of_windows():
    """What the `word_pieces` signature (the page of `bert-keras serve`) answers for a
    windowed pair: each window's pieces and segments as `preprocess_windows` packs them,
    the first text read up to where run_classifier's truncation cuts it, the document whole."""
    max_seq_length, doc_stride = 12, 3
    preprocessor = tiny_preprocessor(max_seq_length=max_seq_length)
    tokenizer = preprocessor.tokenizer
    questions = ["who did go home ?", "where ?", "a", "the cat jumps over the lazy dog"]
    texts = (tf.constant(questions), tf.constant(TEXTS))
    tokenized = [tokenizer.tokenize_with_offsets(text) for text in texts]
    out = word_pieces_outputs(preprocessor, tokenized, doc_stride)
    windows = preprocess_windows(preprocessor, texts, doc_stride).inputs
    pieces = np.array(VOCAB, dtype=object)[windows["input_word_ids"].numpy()]
    expected = np.where(windows["input_mask"].numpy() > 0, pieces, "").tolist()
    assert [[[piece.decode() for piece in window] for window in row] for row in out["word_pieces"].numpy()] == expected
    np.testing.assert_array_equal(out["input_type_ids"], windows["input_type_ids"])
    for row, text in enumerate(TEXTS):
        (_, _, question_ends), (_, _, document_ends) = [[part[row].numpy() for part in t] for t in tokenized]
        kept, _ = truncated_pair_lengths(len(question_ends), len(document_ends), max_seq_length - 3)
        assert out["kept_bytes"][row].numpy().tolist() == [question_ends[kept - 1], len(text.encode())]
        assert out["truncated_pieces"][row].numpy().tolist() == [len(question_ends) - kept, 0]
    assert out["truncated_pieces"][:, 0].numpy().any(), "a question must be cut for this test to mean something"


@pytest.mark.slow
def test_encoder_runs_on_each_window():
    encoder = tiny_encoder()
    windows = preprocess_windows(tiny_preprocessor(max_seq_length=10), tf.constant(TEXTS), doc_stride=4)
    outputs, real = encode_windows(encoder, windows.inputs)
    assert real.numpy().tolist() == [[n > w for w in range(real.shape[1])] for n in windows.starts.row_lengths()]
    for row, count in enumerate(windows.starts.row_lengths().numpy()):
        alone = encoder({name: value[row, :count] for name, value in windows.inputs.items()})
        for name in ("pooled_output", "sequence_output"):
            np.testing.assert_allclose(outputs[name][row, :count], alone[name], atol=1e-5)
            assert not np.any(outputs[name][row, count:])


def test_max_windows_is_a_bound():
    preprocessor = tiny_preprocessor(max_seq_length=10)
    tokens = preprocessor.tokenizer(tf.constant(TEXTS))
    most = int(pack_windows(preprocessor.packer, tokens, 4).starts.row_lengths().numpy().max())
    assert most > 1
    pack_windows(preprocessor.packer, tokens, 4, max_windows=most)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"max_windows={most - 1}"):
        pack_windows(preprocessor.packer, tokens, 4, max_windows=most - 1)


def test_pooling_against_numpy():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 4, 5)).astype("float32")
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], bool)
    weights = rng.integers(1, 9, size=(3, 4)).astype("float32")
    for row in range(3):
        real = values[row, mask[row]]
        np.testing.assert_allclose(pool_windows(values, mask, "max")[row], real.max(0))
        np.testing.assert_allclose(pool_windows(values, mask, "mean")[row], real.mean(0), rtol=1e-6)
        w = weights[row, mask[row]]
        np.testing.assert_allclose(
            pool_windows(values, mask, "mean", weights)[row], (real * w[:, None]).sum(0) / w.sum(), rtol=1e-6
        )
    with pytest.raises(ValueError, match="window pooling"):
        pool_windows(values, mask, "sum")


def test_truncation_notice_counts_what_truncation_drops(capsys):
    from argparse import Namespace

    from run_squad_reference import truncated_pair_lengths

    from bert_keras.tasks.windowing import truncation_notice
    from bert_keras_cli.arguments import report_truncation

    preprocessor = tiny_preprocessor(max_seq_length=10)
    tokenizer = preprocessor.tokenizer
    questions = ["who did go home ?", "where ?", "a", "the cat jumps over the lazy dog"]
    lengths = tokenizer(tf.constant(TEXTS)).row_lengths().numpy().tolist()
    question_lengths = tokenizer(tf.constant(questions)).row_lengths().numpy().tolist()
    single = [max(0, n - 8) for n in lengths]
    pairs = [a + b - sum(truncated_pair_lengths(a, b, 7)) for a, b in zip(question_lengths, lengths)]
    assert truncation_notice(preprocessor, TEXTS, batch_size=3) == (
        f"truncation: {sum(n > 0 for n in single)} of 4 examples are longer than 10 tokens and lose "
        f"{sum(single)} word pieces in all (doc_stride / --doc-stride reads them in windows instead)"
    )
    assert f"lose {sum(pairs)} word pieces" in truncation_notice(preprocessor, (questions, TEXTS))
    assert truncation_notice(preprocessor, ["a dog", ""]) is None
    report_truncation(Namespace(doc_stride=None), preprocessor, TEXTS, "lines")
    report_truncation(Namespace(doc_stride=4), preprocessor, TEXTS, "lines")
    assert capsys.readouterr().out.count(f"truncation: {sum(n > 0 for n in single)} of 4 lines") == 1

"""Vocabulary building: layout, the shared normalisation, and the CLI."""

import collections
import json
import re
from pathlib import Path

import pytest
import tensorflow as tf

from bert_keras.text.tokenizer import BertTokenizer, split_words
from bert_keras.text.vocab import build_vocabulary, corpus_parts, count_words, read_part, reserved_tokens

SHARED = Path(__file__).resolve().parents[3] / "shared"
SAMPLE_TEXT = SHARED / "data" / "pretraining" / "sample_text.txt"
REFERENCE = SHARED / "reference"

pytestmark = pytest.mark.skipif(not SAMPLE_TEXT.exists(), reason=f"shared data folder {SHARED} is absent")


@pytest.mark.parametrize("name, lower_case", [("uncased", True), ("cased", False)])
def test_split_words_is_the_original_basic_tokenizer(name, lower_case):
    with open(REFERENCE / f"tokenization_{name}.jsonl", encoding="utf-8") as lines:
        lines = [json.loads(line) for line in lines]
    lines = [line for line in lines if "[UNK]" not in line["tokens"]]  # [UNK] hides the word
    words = split_words(tf.constant([line["text"] for line in lines]), lower_case).to_list()
    for line, row in zip(lines, words):
        assert [w.decode("utf-8") for w in row] == " ".join(line["tokens"]).replace(" ##", "").split()


def test_learned_vocabulary_layout_and_coverage(tmp_path):
    counts = count_words([str(SAMPLE_TEXT)])
    vocabulary = build_vocabulary(counts, size=400, num_unused=3)
    assert (
        vocabulary[:8]
        == reserved_tokens(3)
        == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    assert 100 < len(vocabulary) <= 400 and len(set(vocabulary)) == len(vocabulary)
    tokenizer = BertTokenizer(vocabulary)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id) == (0, 4, 7)
    ids = tokenizer(tf.constant(SAMPLE_TEXT.read_text(encoding="utf-8").splitlines())).flat_values
    assert float(tf.reduce_mean(tf.cast(ids == tokenizer.unk_id, tf.float32))) < 0.001


def test_cli_writes_vocab_file(tmp_path, capsys):
    import argparse

    from pipelines import vocab as vocab_pipeline

    parser = argparse.ArgumentParser()
    vocab_pipeline.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "vocab.txt"
    args = parser.parse_args(
        ["vocab", "--corpus", str(SAMPLE_TEXT), "--size", "300", "--out", str(out), "--no-lower-case"]
    )
    assert args.lower_case is False
    args.func(args)
    tokens = out.read_text(encoding="utf-8").splitlines()
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(tokens) <= 300
    assert any(token[:1].isupper() for token in tokens[5:])  # cased
    # stderr is not a terminal here: plain lines, no carriage returns redrawing one line.
    progress = capsys.readouterr().err
    assert "\r" not in progress
    assert re.search(r"^counting words: [\d.]+ of [\d.]+ MiB, \d+ distinct words$", progress, re.M), progress


def test_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="no room"):
        build_vocabulary({"a": 1}, size=5)
    with pytest.raises(ValueError, match="empty"):
        build_vocabulary({}, size=100)


def original_counts(files, lower_case=True):
    """The counts of the first `count_words`: whole files through tf.data, a batch of lines at a time."""
    counts = collections.Counter()
    for words in tf.data.TextLineDataset([str(path) for path in files]).batch(512):
        counts.update(word.decode("utf-8") for word in split_words(words, lower_case).flat_values.numpy())
    return counts


def test_counts_are_the_same_whatever_the_parts_workers_or_runner(tmp_path):
    from bert_keras.text import vocab_beam  # apache-beam is a dev dependency: CI runs this

    files = [SAMPLE_TEXT, SHARED / "data" / "pretraining" / "gutenberg" / "chesterton-thursday.txt"]
    expected = original_counts(files, lower_case=False)
    assert len(expected) > 5000
    files = [str(path) for path in files]
    assert count_words(files, lower_case=False) == expected
    reports = []
    counts = count_words(files, False, part_bytes=40_000, workers=2, progress=lambda *report: reports.append(report))
    assert counts == expected
    assert len(reports) == 1 + 9 and reports[-1][:2] == (reports[-1][1], sum(Path(f).stat().st_size for f in files))
    prefix = str(tmp_path / "counts")
    assert vocab_beam.count_words(files, prefix, ["--runner=DirectRunner"], False, part_bytes=100_000) == expected
    assert not list(tmp_path.iterdir())  # the runner's count files are removed


def test_parts_cut_at_line_starts(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"ab cd\nef\n\ngh ij kl\nmn")
    parts = corpus_parts([str(path)], part_bytes=4)
    assert [read_part(*part) for part in parts] == [b"ab cd\n", b"ef\n", b"\ngh ij kl\n", b"", b"mn", b""]


def test_a_binary_corpus_file_is_a_clear_error(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"weights\n" + bytes(range(256)) * 4)
    with pytest.raises(ValueError, match=f"{path}: not a text file: a NUL byte near offset 8"):
        count_words([str(path)])

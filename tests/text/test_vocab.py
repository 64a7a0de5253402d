"""Vocabulary building: layout, the shared normalisation, and the CLI."""

import json
from pathlib import Path

import pytest
import tensorflow as tf

from bert_keras.text.tokenizer import BertTokenizer, split_words
from bert_keras.text.vocab import build_vocabulary, count_words, reserved_tokens

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


def test_cli_writes_vocab_file(tmp_path):
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


def test_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="no room"):
        build_vocabulary({"a": 1}, size=5)
    with pytest.raises(ValueError, match="empty"):
        build_vocabulary({}, size=100)

"""Vocabulary building: layout, the shared normalisation, and the CLI."""

import collections
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from conftest import REFERENCE, SHARED

from bert_keras.text.tokenizer import BertTokenizer
from bert_keras.text.vocab import build_vocabulary, corpus_parts, count_words, read_part, reserved_tokens
from bert_keras.text.word_piece_graph import _REMOVED_PATTERN
from bert_keras.text.words import split_words

SAMPLE_TEXT = SHARED / "data" / "pretraining" / "sample_text.txt"

pytestmark = pytest.mark.skipif(not SAMPLE_TEXT.exists(), reason=f"shared data folder {SHARED} is absent")


# The word boundaries of the original's BasicTokenizer in RE2 (`tf_split_words`).
PUNCTUATION_OR_CJK = (
    r"[\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e\p{P}\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}"
    r"\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}"
    r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)


def tf_split_words(text, lower_case=True):
    """The reference: the words `BertTokenizer`'s graph ops make of strings `[batch]` (its
    cleaning pattern, ICU lower-casing and NFD, RE2's classes), ragged `[batch, (words)]`:
    the counting of `bert-keras vocab` before it ran in plain Python."""
    text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    text = tf.strings.regex_replace(text, _REMOVED_PATTERN + r"|\x{2063}", "")
    if lower_case:
        text = tf.strings.lower(text, encoding="utf-8")
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    return tf_text.regex_split(text, r"[\t\n\r\p{Z}]|" + PUNCTUATION_OR_CJK, PUNCTUATION_OR_CJK)


@pytest.mark.parametrize("name, lower_case", [("uncased", True), ("cased", False)])
def test_split_words_is_the_original_basic_tokenizer(name, lower_case):
    with open(REFERENCE / f"tokenization_{name}.jsonl", encoding="utf-8") as lines:
        lines = [json.loads(line) for line in lines]
    lines = [line for line in lines if "[UNK]" not in line["tokens"]]  # [UNK] hides the word
    assert len(lines) > 800
    for line in lines:
        assert split_words(line["text"], lower_case) == " ".join(line["tokens"]).replace(" ##", "").split()


@pytest.mark.parametrize("lower_case", [True, False])
def test_split_words_is_the_tokenizer_graph_on_every_code_point(lower_case):
    """Every code point of the BMP and every 7th of planes 1 and 2 (CJK, historic scripts,
    emoji), between letters, after a sigma (final-sigma context), doubled and before an
    accented letter, a line each: the graph's words, but where the Unicode versions differ:
    code points Python's Unicode (14 on 3.11) leaves unassigned, and letters whose lower case
    ICU's older table in TensorFlow does not know (`str.lower` and the original lower them)."""
    code_points = [code for code in range(0x10000) if not 0xD800 <= code <= 0xDFFF]
    code_points += list(range(0x10000, 0x30000, 7))
    lines = [f"a{chr(code)}b \u03a3{chr(code)} {chr(code) * 2}\u00c9" for code in code_points]
    rows = tf_split_words(tf.constant(lines), lower_case).to_list()
    differ, words = [], 0
    # Texts of 256 lines: a text of all of them, with 80,000 distinct characters in its
    # regular expressions' classes, takes 12 s where these take 0.5 s in all.
    for start in range(0, len(lines), 256):
        group, group_rows = lines[start : start + 256], rows[start : start + 256]
        got = split_words("\n".join(group), lower_case)
        words += len(got)
        if got != [word.decode("utf-8") for row in group_rows for word in row]:
            differ += [
                chr(code)
                for code, line, row in zip(code_points[start:], group, group_rows)
                if split_words(line, lower_case) != [word.decode("utf-8") for word in row]
            ]
    assert words > 3 * len(lines)
    if differ:
        excused = set()  # letters the graph's lower-casing leaves as they are
        if lower_case:
            lowered = tf.strings.lower(differ, encoding="utf-8").numpy()
            excused = {c for c, low in zip(differ, lowered) if c.lower().encode("utf-8") != low}
        unknown = [c for c in differ if unicodedata.category(c) != "Cn" and c not in excused]
        assert not unknown, [hex(ord(c)) for c in unknown[:20]]


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

    from bert_keras_cli import vocab as vocab_pipeline

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
    """The counts of the first `count_words`: whole files through tf.data and the graph's ops."""
    counts = collections.Counter()
    for words in tf.data.TextLineDataset([str(path) for path in files]).batch(512):
        counts.update(word.decode("utf-8") for word in tf_split_words(words, lower_case).flat_values.numpy())
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("lower_case", [True, False])
def test_counts_are_the_graphs_on_real_unicode_text(tmp_path, lower_case):
    """SQuAD's contexts and questions (names, places and quotes in many scripts) and CoNLL-2003."""
    squad = json.loads((SHARED / "data" / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    texts = [p["context"] for a in squad["data"] for p in a["paragraphs"]]
    texts += [q["question"] for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]
    corpus = tmp_path / "squad.txt"
    corpus.write_text("\n".join(text.replace("\n", " ") for text in texts), encoding="utf-8")
    files = [corpus, SHARED / "data" / "conll2003" / "eng.testa"]
    expected = original_counts(files, lower_case)
    assert len(expected) > 25000 and sum(not word.isascii() for word in expected) > 200
    assert count_words([str(path) for path in files], lower_case, part_bytes=1_000_000) == expected


@pytest.mark.slow
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


def test_pruned_counts_keep_their_guarantee():
    """Lossy counting (`max_words`): at most that many words, every word seen more than the
    floor kept, each count at most the floor short; the default stays exact (floor 0)."""
    files = [str(path) for path in sorted((SHARED / "data" / "pretraining" / "gutenberg").glob("*.txt"))[:3]]
    exact = count_words(files, part_bytes=50_000)
    assert exact.floor == 0 and exact == count_words(files)
    for max_words in (1000, 5000):
        pruned = count_words(files, part_bytes=50_000, max_words=max_words)
        floor = pruned.floor
        assert 0 < floor < 100 and max_words // 2 < len(pruned) <= max_words < len(exact)
        assert all(exact[word] - floor <= count <= exact[word] for word, count in pruned.items())
        assert all(word in pruned for word, count in exact.items() if count > floor)
        assert any(count < exact[word] for word, count in pruned.items())  # counts did come short


@pytest.mark.slow
def test_the_command_runs_without_tensorflow(tmp_path):
    """`bert-keras vocab` counts (in forked workers too) and learns without importing TensorFlow,
    and leaves `import bert_keras` whole for what follows in the process."""
    code = (
        "import sys; from bert_keras_cli.cli import main; code = main(sys.argv[1:]); "
        "print(code, 'tensorflow' in sys.modules); import bert_keras; print(bert_keras.BertTokenizer.__name__)"
    )
    files = [str(SAMPLE_TEXT), str(SHARED / "data" / "pretraining" / "gutenberg" / "chesterton-thursday.txt")]
    argv = ["vocab", "--corpus", *files, "--size", "500", "--out", str(tmp_path / "vocab.txt"), "--workers", "2"]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "False", "BertTokenizer"], out.stderr
    vocabulary = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocabulary == build_vocabulary(count_words(files), 500)


def test_the_command_prunes_when_asked(tmp_path, capsys):
    from bert_keras_cli.cli import main

    book = str(SHARED / "data" / "pretraining" / "gutenberg" / "chesterton-thursday.txt")
    out = tmp_path / "vocab.txt"
    assert main(["vocab", "--corpus", book, "--size", "500", "--out", str(out), "--max-distinct-words", "3000"]) == 0
    counts = count_words([book], max_words=3000)
    assert len(counts) <= 3000 < len(count_words([book])) and counts.floor > 0
    expected = f"pruned to 3000 distinct words: words seen more than {counts.floor} times are all counted"
    assert expected in capsys.readouterr().err
    assert out.read_text(encoding="utf-8").splitlines() == build_vocabulary(counts, 500)


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

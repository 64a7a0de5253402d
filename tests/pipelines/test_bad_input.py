"""Issue 23: every bad file the CLI reads is one clear error (exit code 2, the file named,
no traceback), the text readers never fail with an unhandled exception on any input
(hypothesis), and a training set smaller than one batch trains instead of hanging."""

import json
import shutil
import string

import pytest
from conftest import DATA, REFERENCE, VOCAB_FILE, require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_keras import BertConfig, BertEncoder, BertTokenizer
from bert_keras.datasets.conll import read_conll
from bert_keras.datasets.squad import read_squad
from bert_keras.datasets.tsv import read_rows
from bert_keras.models.dtype import cpu_has_bfloat16
from bert_keras_cli.cli import main as cli

RECORDS = REFERENCE / "pretraining_trajectory" / "train.tfrecord"
# Bytes of a real binary file: the start of a TFRecord (lengths, CRCs, protobuf).
BINARY = b"\xd0\x02\x00\x00\x00\x00\x00\x00\x8b\xe1\x1f\x93\n\xcb\x05\n\x0e"
LATIN1 = "text\tlabel\ncaf\u00e9 cr\u00e8me\tpos\nbad\tneg\n".encode("latin-1")


@pytest.fixture(scope="module")
def encoder_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("encoder") / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(path)
    return path


def write_tsv(path, rows):
    path.write_text("text\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")
    return path


def finetune_tsv(tmp_path, train, dev, init, *extra):
    return cli(
        [
            "finetune",
            "tsv",
            "--train",
            str(train),
            "--dev",
            str(dev),
            "--output-dir",
            str(tmp_path / "run"),
            "--init",
            str(init),
            "--vocab",
            str(require(VOCAB_FILE)),
            "--verbose",
            "0",
            *extra,
        ]
    )


def assert_clear_error(capsys, *words):
    """The CLI's one-line error names what it should (main() returned 2 already)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for word in words:
        assert str(word) in err, err


# --- TSV, CoNLL, SQuAD, vocab: binary or non-UTF-8 content ------------------------------


@pytest.mark.parametrize(
    "content, problem", [(BINARY, "a NUL byte at offset 2 (line 1)"), (LATIN1, "byte 0xe9 at offset 14 (line 2)")]
)
def test_finetune_tsv_on_a_binary_or_latin1_file(tmp_path, capsys, encoder_file, content, problem):
    bad = tmp_path / "train.tsv"
    bad.write_bytes(content)
    dev = write_tsv(tmp_path / "dev.tsv", [("good", "pos"), ("bad", "neg")])
    assert finetune_tsv(tmp_path, bad, dev, encoder_file) == 2
    assert_clear_error(capsys, bad, problem)


def test_conll_squad_and_vocab_readers_name_a_binary_file(tmp_path):
    bad = tmp_path / "binary"
    bad.write_bytes(BINARY)
    for read in (read_conll, read_squad, BertTokenizer):
        with pytest.raises(ValueError, match=f"{bad}: not a .* text file: a NUL byte at offset 2"):
            read(str(bad))
    bad.write_bytes(LATIN1)
    with pytest.raises(ValueError, match=f"{bad}: not UTF-8 text: byte 0xe9 at offset 14 \\(line 2\\)"):
        read_conll(bad)
    with pytest.raises(FileNotFoundError, match="no vocab file at"):
        BertTokenizer(str(tmp_path / "missing.txt"))


def test_finetune_conll_and_squad_on_binary_files(tmp_path, capsys, encoder_file):
    (tmp_path / "eng.train").write_bytes(BINARY)
    shutil.copy(require(DATA / "conll2003" / "eng.testa"), tmp_path / "eng.testa")
    assert (
        cli(
            [
                "finetune",
                "conll",
                "--data-dir",
                str(tmp_path),
                "--output-dir",
                str(tmp_path / "c"),
                "--init",
                str(encoder_file),
                "--vocab",
                str(require(VOCAB_FILE)),
            ]
        )
        == 2
    )
    assert_clear_error(capsys, tmp_path / "eng.train", "NUL byte")
    squad = tmp_path / "train.json"
    squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": 1}]}]}]}))
    assert (
        cli(
            [
                "finetune",
                "squad",
                "--train-file",
                str(squad),
                "--predict-file",
                str(squad),
                "--output-dir",
                str(tmp_path / "s"),
                "--init",
                str(encoder_file),
                "--vocab",
                str(VOCAB_FILE),
            ]
        )
        == 2
    )
    assert_clear_error(capsys, squad, "data[0].paragraphs[0].qas[0] is not a SQuAD")


# --- TFRecords: not a TFRecord, truncated (found mid-training), empty, other lengths -------


def pretrain(tmp_path, records, *extra):
    return cli(
        [
            "pretrain",
            "--config",
            "tiny",
            "--vocab",
            str(require(VOCAB_FILE)),
            "--data",
            str(records),
            "--output",
            str(tmp_path / "run"),
            "--batch-size",
            "8",
            "--steps",
            "12",
            "--checkpoint-every",
            "6",
            "--warmup-steps",
            "2",
            *extra,
        ]
    )


def test_pretrain_on_a_file_that_is_not_a_tfrecord(tmp_path, capsys):
    text = tmp_path / "corpus.tfrecord"
    text.write_text("this is a sentence, not a TFRecord file\n" * 20)
    assert pretrain(tmp_path, text) == 2
    assert_clear_error(
        capsys, text, "not a TFRecord file, or truncated or corrupt at record 0", "corrupted record at 0"
    )
    assert not (tmp_path / "run").exists()  # stopped before any work


@pytest.mark.slow
def test_pretrain_on_a_truncated_tfrecord_names_it_when_training_reaches_the_cut(tmp_path, capsys):
    raw = require(RECORDS).read_bytes()
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(raw[: len(raw) // 3])  # the first 71 of 215 records whole
    assert pretrain(tmp_path, truncated) == 2
    assert_clear_error(capsys, truncated, "corrupt at record 71", "truncated record at")


def test_pretrain_on_an_empty_tfrecord_or_one_of_other_lengths(tmp_path, capsys):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert pretrain(tmp_path, empty) == 2
    assert_clear_error(capsys, f"its share of phase1's --data ({empty}) is empty")
    assert pretrain(tmp_path, require(RECORDS), "--seq-length", "64") == 2  # the file holds 128-token records
    assert_clear_error(capsys, RECORDS, "record 0 is not a pre-training example of seq length 64")


# --- checkpoints: .keras, safetensors, TF1 ----------------------------------------------


def test_truncated_or_foreign_keras_files(tmp_path, capsys, encoder_file):
    raw = encoder_file.read_bytes()
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="not a .keras file, or truncated: not a complete zip archive"):
        BertEncoder.from_checkpoint(truncated)
    train = write_tsv(tmp_path / "train.tsv", [("good", "pos"), ("bad", "neg")])
    assert finetune_tsv(tmp_path, train, train, truncated) == 2
    assert_clear_error(capsys, truncated, "truncated")
    assert cli(["export", str(truncated), "--out", str(tmp_path / "export")]) == 2
    assert_clear_error(capsys, truncated, "truncated")


def test_truncated_safetensors_and_tf1_checkpoints(tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(require(REFERENCE / "tiny_pretraining_hf"), hf)
    weights = hf / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:10000])
    with pytest.raises(ValueError, match=f"cannot read {weights}"):
        BertEncoder.from_checkpoint(hf)
    tf1 = tmp_path / "tf1"
    shutil.copytree(require(REFERENCE / "tiny_pretraining_tf1"), tf1)
    data = tf1 / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:10000])
    with pytest.raises(ValueError, match=r"cannot read TF1 checkpoint .*bert_model.ckpt \(variable .*\): Read less"):
        BertEncoder.from_checkpoint(tf1)


def bad_models(folder, encoder_file):
    """{case: path} of files and folders that are no model: each command must say so alike."""
    raw = encoder_file.read_bytes()
    paths = {name: folder / name for name in ("empty.keras", "text.keras", "truncated.keras", "model.bin")}
    paths["empty.keras"].write_bytes(b"")
    paths["text.keras"].write_text("not a model\n")
    paths["truncated.keras"].write_bytes(raw[: len(raw) // 2])
    paths["model.bin"].write_bytes(BINARY)
    for name in ("empty_folder", "other_files"):
        paths[name] = folder / name
        paths[name].mkdir()
    (paths["other_files"] / "notes.txt").write_text("no weights here\n")
    hf = folder / "truncated_hf"
    shutil.copytree(require(REFERENCE / "tiny_pretraining_hf"), hf)
    (hf / "model.safetensors").write_bytes((hf / "model.safetensors").read_bytes()[:10000])
    paths["truncated_hf"] = hf
    return paths


def command_error(capsys, argv):
    """The one-line error a command ends with, without the command's name."""
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "\n" not in err, err
    command, _, message = err.partition(": error: ")
    assert command == f"bert-keras {argv[0]}", err
    return message


def test_a_bad_model_is_the_same_error_naming_it_in_every_command(tmp_path, capsys, encoder_file):
    rows = tmp_path / "in.txt"
    rows.write_text("the fox\n")
    for case, path in bad_models(tmp_path, encoder_file).items():
        messages = {
            "predict": command_error(
                capsys, ["predict", str(path), "--input", str(rows), "--output", str(tmp_path / "o.jsonl")]
            ),
            "export": command_error(capsys, ["export", str(path), "--out", str(tmp_path / "export")]),
            "convert": command_error(capsys, ["convert", str(path), "--to", "hf", str(tmp_path / "converted")]),
        }
        assert len(set(messages.values())) == 1, (case, messages)
        assert str(path) in messages["predict"], (case, messages)


def test_a_saved_model_export_is_named_where_a_model_is_loaded(tmp_path, capsys, encoder_file):
    export = tmp_path / "base" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    expected = f"{export} is a SavedModel export; give the .keras file or checkpoint it was exported from"
    assert command_error(capsys, ["export", str(export), "--out", str(tmp_path / "again")]) == expected
    assert command_error(capsys, ["convert", str(export), "--to", "hf", str(tmp_path / "converted")]) == expected


# --- fuzz: the readers parse or raise a clear error, never anything else -----------------

TEXT = st.text(alphabet=st.sampled_from(string.printable + "\t\u00e9\u4e2d\ufeff\x00"), max_size=200)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def parses_or_explains(read, path):
    try:
        read(path)
    except ValueError as error:
        assert str(path) in str(error)


@FUZZ
@given(content=st.one_of(TEXT.map(lambda text: text.encode("utf-8")), st.binary(max_size=200)))
def test_fuzz_tsv_and_conll_readers(tmp_path, content):
    path = tmp_path / "fuzz.txt"
    path.write_bytes(content)
    parses_or_explains(lambda p: read_rows(p, header=True), path)
    parses_or_explains(read_conll, path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "data",
                    "paragraphs",
                    "context",
                    "qas",
                    "id",
                    "question",
                    "answers",
                    "text",
                    "answer_start",
                    "is_impossible",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@FUZZ
@given(document=JSON, raw=st.binary(max_size=50))
def test_fuzz_squad_reader(tmp_path, document, raw):
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(document))
    parses_or_explains(read_squad, path)
    path.write_bytes(raw)
    parses_or_explains(read_squad, path)


# --- small data, bf16 -------------------------------------------------------------------


@pytest.mark.slow
def test_finetune_tsv_with_fewer_examples_than_one_batch(tmp_path, capsys, encoder_file):
    """4 examples with the default batch of 32 used to wait forever at "Epoch 1/2"."""
    rows = [("a good movie", "pos"), ("a bad movie", "neg"), ("great fun", "pos"), ("awful", "neg")]
    train = write_tsv(tmp_path / "train.tsv", rows)
    with pytest.warns(UserWarning, match="4 training example.* fewer than the batch size 32: .* batches of 4"):
        assert finetune_tsv(tmp_path, train, train, encoder_file, "--epochs", "2") == 0
    assert "training 2 steps (2 epoch(s) of 1), batch 4" in capsys.readouterr().out
    history = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert [entry["epoch"] for entry in history[:2]] == [1, 2]


@pytest.mark.slow
def test_finetune_stops_at_max_train_steps(tmp_path, capsys, encoder_file):
    """12 examples in batches of 4 are epochs of 3 steps: 7 steps are 3 epochs, the last
    of 1 step (equal epochs would run 9), and the logs end at step 7."""
    from bert_keras_cli.plot import read_curves

    rows = [(f"movie number {i} was {'good' if i % 2 else 'bad'}", "pos" if i % 2 else "neg") for i in range(12)]
    train = write_tsv(tmp_path / "train.tsv", rows)
    args = ("--batch-size", "4", "--epochs", "3", "--max-train-steps", "7")
    assert finetune_tsv(tmp_path, train, train, encoder_file, *args) == 0
    assert "training 7 steps (3 epoch(s) of 3, the last 1), batch 4" in capsys.readouterr().out
    history = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert [entry["epoch"] for entry in history[:3]] == [1, 2, 3]
    assert read_curves(tmp_path / "run").phases[-1][2] == 7


def test_bfloat16_units_are_read_from_cpuinfo(tmp_path):
    with open("/proc/cpuinfo") as file:
        real = file.read()
    flags = set(next(line for line in real.splitlines() if line.startswith("flags")).split(":")[1].split())
    assert cpu_has_bfloat16() == bool(flags & {"avx512_bf16", "amx_bf16"})
    without = tmp_path / "cpuinfo"
    without.write_text(real.replace("avx512_bf16", "").replace("amx_bf16", ""))
    assert cpu_has_bfloat16(without) is False
    with pytest.warns(UserWarning, match="no bfloat16 units"):
        from bert_keras.models.dtype import warn_if_slow_bfloat16

        warn_if_slow_bfloat16("this test", without)
    assert cpu_has_bfloat16(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "not valid JSON"),
        (b"\x00\xff\xfe", "not valid JSON"),
        (b'{"model_max_length": 3', "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
    ],
)
def test_a_broken_tokenizer_config_is_named(tmp_path, content, problem):
    from bert_keras.checkpoint.text_files import tokenizer_max_length

    (tmp_path / "tokenizer_config.json").write_bytes(content)
    with pytest.raises(ValueError, match=f"tokenizer_config.json: {problem}"):
        tokenizer_max_length(tmp_path)

"""The memory flags as the commands hand them to the library: `--window-micro-batch` (the
windowed heads' `window_micro_batch`) and `--recompute` (the encoders' `recompute`), and a
tiny run with both."""

import keras
import pytest
from harness import VOCAB, Reached, command_files, recorder

from bert_keras import BertClassifier, BertConfig, BertEncoder, BertTextEmbedder
from bert_keras.recipes import finetuning, pretraining
from bert_keras_cli.cli import main as cli


@pytest.fixture
def files(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return command_files(tmp_path)


def test_recompute_reaches_the_encoders(files, monkeypatch):
    config = BertConfig.preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=1)
    BertEncoder(config).save(files / "init.keras")
    calls = recorder(monkeypatch, finetuning, "finetune")
    data = str(files / "train.tsv")
    argv = ["finetune", "tsv", "--train", data, "--dev", data, "--init", str(files / "init.keras")]
    argv += ["--vocab", str(files / "vocab.txt"), "--output-dir", str(files / "out")]
    for flags, recompute in (([], False), (["--recompute"], True)):
        with pytest.raises(Reached):
            cli([*argv, *flags])
        assert calls["recompute"] is recompute
    calls = recorder(monkeypatch, pretraining, "pretrain")
    with pytest.raises(Reached):
        cli(
            ["pretrain", "--config", "tiny", "--vocab", str(files / "vocab.txt"), "--corpus", str(files / "lines.txt")]
            + ["--output", str(files / "pre"), "--steps", "1", "--recompute"]
        )
    assert calls["args"][0].encoder.recompute is True


def test_window_micro_batch_reaches_the_training_heads(files, monkeypatch):
    common = ["--init", str(files / "init"), "--output-dir", str(files / "out"), "--window-micro-batch", "8"]
    pairs = str(files / "pairs.tsv")
    for head, task in (
        (BertClassifier, ["tsv", "--train", str(files / "train.tsv"), "--dev", str(files / "train.tsv")]),
        (BertClassifier, ["glue", "--task", "sst-2", "--data-dir", str(files / "SST-2")]),
        (BertTextEmbedder, ["embedder", "--train", pairs, "--dev", pairs]),
    ):
        with monkeypatch.context() as patch, pytest.raises(Reached):
            calls = recorder(patch, head, "from_checkpoint")
            cli(["finetune", *task, *common])
        assert calls["window_micro_batch"] == 8
    with pytest.raises(SystemExit):
        cli(
            [
                "embed",
                "--input",
                str(files / "lines.txt"),
                "--output",
                "v.npy",
                "--init",
                "i",
                "--window-micro-batch",
                "8",
            ]
        )


def test_window_micro_batch_is_a_number_or_all(capsys):
    from bert_keras_cli.cli import build_parser

    argv = ["finetune", "tsv", "--train", "t", "--dev", "t", "--output-dir", "o", "--window-micro-batch"]
    assert build_parser().parse_args([*argv, "all"]).window_micro_batch == "all"
    assert build_parser().parse_args([*argv, "8"]).window_micro_batch == 8
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "some"])
    assert "invalid window_micro_batch value: 'some'" in capsys.readouterr().err


@pytest.mark.slow
def test_finetune_tsv_in_window_micro_batches_with_recompute(tmp_path):
    """A real (tiny) run with both memory flags: the saved model keeps them."""
    from conftest import DATA, require

    text = "a good film , " * 12
    (tmp_path / "long.tsv").write_text(f"text\tlabel\n{text}\tpos\na bad film\tneg\n", encoding="utf-8")
    init = tmp_path / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(init)
    data = str(tmp_path / "long.tsv")
    argv = ["finetune", "tsv", "--train", data, "--dev", data, "--init", str(init), "--batch-size", "2"]
    argv += ["--vocab", str(require(DATA / "vocab" / "vocab.txt")), "--max-train-steps", "1", "--verbose", "0"]
    argv += ["--max-seq-length", "16", "--doc-stride", "8", "--window-micro-batch", "3", "--recompute"]
    assert cli([*argv, "--output-dir", str(tmp_path / "run")]) == 0
    model = keras.saving.load_model(tmp_path / "run" / "best.keras")
    assert (model.doc_stride, model.window_micro_batch, model.encoder.recompute) == (8, 3, True)

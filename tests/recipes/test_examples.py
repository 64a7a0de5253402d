"""docs/examples/*.py, the Keras scripts of the pre-training and fine-tuning runs: each
runs, and trains to the same weights as the `bert-keras` command it says it equals
(tiny models, a few steps)."""

import re
import runpy
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from conftest import DATA, VOCAB_FILE, require

from bert_keras import BertConfig, BertEncoder, BertPretrainer
from bert_keras.models.saving import save_checkpoint
from bert_keras_cli.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
SAMPLE = DATA / "pretraining" / "sample_text.txt"


def run_example(name, *argv, monkeypatch, capsys):
    """Runs docs/examples/NAME as `python NAME ARGV` does (in this process, as a fresh
    process would: it sets its own seed). Returns what it printed."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *map(str, argv)])
    capsys.readouterr()
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    captured = capsys.readouterr()
    return captured.out + captured.err


def bert_keras(*argv):
    assert main([str(arg) for arg in argv]) == 0


def assert_same_weights(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_pretrain_example_is_the_pretrain_command_and_resumes(tmp_path, monkeypatch, capsys):
    steps = 4
    example = ("pretrain.py", require(VOCAB_FILE), require(SAMPLE), tmp_path / "script", steps)
    printed = run_example(*example, monkeypatch=monkeypatch, capsys=capsys)
    assert re.search(r"masked LM accuracy by checkpoint interval: (0\.\d{3}, ){3}0\.\d{3}$", printed, re.M), printed
    bert_keras(
        *("pretrain", "--config", "tiny", "--vocab", VOCAB_FILE, "--corpus", SAMPLE, "--output", tmp_path / "cli"),
        *("--steps", steps, "--checkpoint-every", steps // 4, "--warmup-steps", 1, "--learning-rate", 1e-3),
    )
    script, cli = (BertEncoder.from_checkpoint(tmp_path / run / "final" / "encoder.keras") for run in ("script", "cli"))
    keras.utils.set_random_seed(0)  # the weights both started from
    initial = BertPretrainer(BertEncoder(script.config)).encoder.get_weights()
    assert not np.allclose(script.get_weights()[0], initial[0])  # trained
    assert_same_weights(script.get_weights(), cli.get_weights())
    # Run again: the restored optimizer says the phase is done.
    again = run_example(*example, monkeypatch=monkeypatch, capsys=capsys)
    assert f"phase1: resuming after step {steps} of {steps}" in again


@pytest.fixture
def tsv_task(tmp_path):
    """12 SST-2 sentences to train on, 8 to evaluate, and a one-layer encoder in the
    Hugging Face format with its vocab.txt."""
    rows = require(DATA / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:21]
    (tmp_path / "train.tsv").write_text("text\tlabel\n" + "\n".join(rows[:12]) + "\n", encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("text\tlabel\n" + "\n".join(rows[12:]) + "\n", encoding="utf-8")
    encoder = BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1))
    save_checkpoint(encoder, tmp_path / "encoder", "hf", vocab_path=require(VOCAB_FILE))
    return tmp_path


@pytest.mark.slow
def test_finetune_example_is_the_finetune_tsv_command(tsv_task, monkeypatch, capsys):
    task = tsv_task
    example = ("finetune.py", task / "encoder", task / "train.tsv", task / "dev.tsv", task / "script", 3)
    printed = run_example(*example, monkeypatch=monkeypatch, capsys=capsys)
    assert "best dev accuracy" in printed
    bert_keras(
        *("finetune", "tsv", "--init", task / "encoder", "--train", task / "train.tsv", "--dev", task / "dev.tsv"),
        *("--output-dir", task / "cli", "--max-train-steps", 3, "--verbose", 0),
    )
    script, cli = (keras.saving.load_model(task / run / "best.keras") for run in ("script", "cli"))
    assert script.labels == cli.labels
    assert_same_weights(script.get_weights(), cli.get_weights())

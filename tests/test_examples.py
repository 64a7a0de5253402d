"""docs/examples/*.py, the Keras scripts of the pre-training and fine-tuning runs: each
runs, and trains to the same weights as the `bert-keras` command it says it equals."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, require

from bert_keras import BertConfig, BertEncoder
from bert_keras.models.saving import save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
VOCAB = DATA / "vocab" / "vocab.txt"
SAMPLE = DATA / "pretraining" / "sample_text.txt"


def python(*argv):
    """Runs `python ARGV` in a process of its own (its own seeds and Keras state)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, *map(str, argv)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def bert_keras(*argv):
    return python("-m", "pipelines.cli", *argv)


def assert_same_weights(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_pretrain_example_is_the_pretrain_command_and_resumes(tmp_path):
    steps = 4
    printed = python(EXAMPLES / "pretrain.py", require(VOCAB), require(SAMPLE), tmp_path / "script", steps)
    assert "masked LM accuracy:" in printed
    bert_keras(
        *("pretrain", "--config", "tiny", "--vocab", VOCAB, "--corpus", SAMPLE, "--output", tmp_path / "cli"),
        *("--steps", steps, "--checkpoint-every", steps // 4, "--warmup-steps", 1, "--learning-rate", 1e-3),
    )
    script, cli = (BertEncoder.from_checkpoint(tmp_path / run / "final" / "encoder.keras") for run in ("script", "cli"))
    untrained = BertEncoder(script.config)
    assert not np.allclose(script.get_weights()[0], untrained.get_weights()[0])
    assert_same_weights(script.get_weights(), cli.get_weights())
    # Run again: the restored optimizer says the phase is done.
    again = python(EXAMPLES / "pretrain.py", VOCAB, SAMPLE, tmp_path / "script", steps)
    assert f"phase1: resuming after step {steps} of {steps}" in again


@pytest.fixture
def tsv_task(tmp_path):
    """12 SST-2 sentences to train on, 8 to evaluate, and a one-layer encoder in the
    Hugging Face format with its vocab.txt."""
    rows = require(DATA / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:21]
    (tmp_path / "train.tsv").write_text("text\tlabel\n" + "\n".join(rows[:12]) + "\n", encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("text\tlabel\n" + "\n".join(rows[12:]) + "\n", encoding="utf-8")
    encoder = BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1))
    save_checkpoint(encoder, tmp_path / "encoder", "hf", vocab_path=require(VOCAB))
    return tmp_path


def test_finetune_example_is_the_finetune_tsv_command(tsv_task):
    task = tsv_task
    printed = python(
        EXAMPLES / "finetune.py", task / "encoder", task / "train.tsv", task / "dev.tsv", task / "script", 3
    )
    assert "best dev accuracy" in printed
    bert_keras(
        *("finetune", "tsv", "--init", task / "encoder", "--train", task / "train.tsv", "--dev", task / "dev.tsv"),
        *("--output-dir", task / "cli", "--max-train-steps", 3, "--verbose", 0),
    )
    import keras

    script, cli = (keras.saving.load_model(task / run / "best.keras") for run in ("script", "cli"))
    assert script.labels == cli.labels
    assert_same_weights(script.get_weights(), cli.get_weights())

"""`bert_keras.recipes.finetune` in Python: SIGTERM backs the run up and exits, the same
call resumes it, and a call with another schedule is refused naming what differs."""

import json
import os
import signal

import numpy as np
import pytest
from harness import ONE_LAYER_TINY, tiny_encoder, tiny_preprocessor

from bert_keras import BertClassifier
from bert_keras.datasets.metrics import accuracy
from bert_keras.recipes.finetuning import finetune
from bert_keras.training.backup import StepBackup
from bert_keras.training.finetuning import length_grouped_batches

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog", "it was good !", "bad"] * 2
LABELS = np.array([1, 0, 1, 0, 1, 0] * 2, "int32")


def batches():
    return length_grouped_batches((np.array(TEXTS), LABELS), [len(t) for t in TEXTS], 4, shuffle=True, seed=0)


def run(output_dir, learning_rate=1e-3, backup_steps=2, train_batches=batches):
    """12 examples in batches of 4: two epochs of 3 steps, backed up every `backup_steps` steps."""
    model = BertClassifier(tiny_encoder(config=ONE_LAYER_TINY), 2, preprocessor=tiny_preprocessor())
    return finetune(
        model,
        train_batches,
        len(TEXTS),
        lambda model: {"accuracy": accuracy(LABELS, model.predict(TEXTS, verbose=0).argmax(-1))},
        "accuracy",
        output_dir=output_dir,
        batch_size=4,
        epochs=2,
        learning_rate=learning_rate,
        backup_steps=backup_steps,
        verbose=0,
    )


def test_sigterm_backs_up_and_exits_and_the_same_call_resumes(tmp_path, monkeypatch, capsys):
    whole = run(tmp_path / "whole")
    handler = signal.getsignal(signal.SIGTERM)
    original = StepBackup.on_train_batch_begin

    def terminated_in_step_3(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with monkeypatch.context() as patch:
        patch.setattr(StepBackup, "on_train_batch_begin", terminated_in_step_3, raising=False)
        with pytest.raises(SystemExit) as exit:
            run(tmp_path / "run")
    assert exit.value.code == 128 + signal.SIGTERM
    assert "SIGTERM: backed up after step 3" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == handler  # SIGTERM is the process's again
    assert json.loads((tmp_path / "run" / "checkpoints" / "state.json").read_text())["step"] == 3

    with pytest.raises(ValueError, match=r"other inputs or settings \(learning_rate: 0.001 there, 0.002 now\)"):
        run(tmp_path / "run", learning_rate=2e-3)
    resumed = run(tmp_path / "run")
    assert "resuming after step 3 of 6" in capsys.readouterr().out
    assert [epoch["accuracy"] for epoch in resumed.evaluations[:-1]] == [
        epoch["accuracy"] for epoch in whole.evaluations[:-1]
    ]
    for got, want in zip(resumed.model.get_weights(), whole.model.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert resumed.history.epoch == [1] and not (tmp_path / "run" / "checkpoints").exists()


def test_step_backups_leave_the_uninterrupted_run_unchanged(tmp_path):
    """Backups every step or none inside the run (a dataset, not a function): the same
    weights, as a backup changes no state."""
    often = run(tmp_path / "often", backup_steps=1)
    rare = run(tmp_path / "rare", backup_steps=1000, train_batches=batches())
    for got, want in zip(rare.model.get_weights(), often.model.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-6)

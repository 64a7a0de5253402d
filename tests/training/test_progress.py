"""Progress written to a file or a pipe is plain lines: no `\\r`, backspaces or colour codes."""

import re

import keras
import numpy as np

from bert_keras.training.callbacks import StopAfterSteps
from bert_keras.training.progress import PlainProgress, ProgressLines, fit_progress, progress_bar

REDRAWING = re.compile(r"[\r\b\x1b]")


def tiny_model():
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_fit_without_a_terminal_prints_plain_lines(capsys):
    verbose, callbacks = fit_progress(1, every_seconds=0)  # capsys: stdout is not a terminal
    assert verbose == 0 and [type(callback) for callback in callbacks] == [PlainProgress]
    x, y = np.ones((8, 2), "float32"), np.ones((8, 1), "float32")
    tiny_model().fit(x, y, batch_size=2, epochs=2, validation_data=(x, y), verbose=verbose, callbacks=callbacks)
    out = capsys.readouterr().out
    assert not REDRAWING.search(out), repr(out)
    lines = out.splitlines()
    epoch = [f"{step}/4 steps" for step in (1, 2, 3, 4)]
    assert [line.split(",")[0] for line in lines] == ["Epoch 1/2", *epoch, "Epoch 2/2", *epoch]
    assert "val_loss:" in lines[4] and "val_loss:" in lines[9] and "val_loss" not in lines[3]
    assert re.fullmatch(r"2/4 steps, \d+s \(.* steps/s\) - loss: [\d.e-]+", lines[2]), lines[2]


def test_an_epoch_stopped_early_says_how_many_steps_it_ran(capsys):
    """A run of 6 steps in epochs of 4: the second epoch ran 2 of its 4 planned steps."""
    x, y = np.ones((8, 2), "float32"), np.ones((8, 1), "float32")
    callbacks = [StopAfterSteps(6, 4), PlainProgress(every_seconds=3600)]
    tiny_model().fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=callbacks)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines if line] == [
        "Epoch 1/2",
        "4/4 steps",
        "Epoch 2/2",
        "stopping after batch 6: this epoch ran 2 of its 4",  # StopAfterSteps
        "2/4 steps",
    ]


def test_a_terminal_keeps_keras_progress_bar(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True, raising=False)
    assert fit_progress(1) == (1, [])
    assert isinstance(progress_bar(10), keras.utils.Progbar)


def test_progress_lines_are_periodic(capsys):
    lines = ProgressLines(100, unit_name="text", every_seconds=3600)
    for _ in range(10):
        lines.add(10)
    out = capsys.readouterr().out
    assert re.fullmatch(r"100/100 texts, \d+s \(.* texts/s\)\n", out), repr(out)
    assert isinstance(progress_bar(10, unit_name="text"), ProgressLines)
    assert fit_progress(2) == (2, [])  # Keras' own line per epoch is plain already

"""`bert-keras plot`: the curves read back from real Keras TensorBoard logs are the
values Keras reported while training, on the right steps, and the PNG is a real image."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from bert_keras_cli import cli
from bert_keras_cli.plot import COLUMNS, DPI, PANEL_INCHES, read_curves

STEPS_PER_EPOCH = 4
BATCH = 8


def tiny_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse", metrics=["mae"])
    return model


def tiny_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH, 3)).astype("float32")
    return x, x @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3


class BatchLosses(keras.callbacks.Callback):
    """The loss Keras reports after every batch, keyed by the step within the run
    (epoch * steps per epoch + batch + 1), the latest report winning."""

    def __init__(self, losses):
        super().__init__()
        self.losses = losses

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.losses[self.epoch * STEPS_PER_EPOCH + batch + 1] = logs["loss"]


class Interrupt(keras.callbacks.Callback):
    """Dies in the middle of epoch `epoch`, as a killed job does, after the TensorBoard
    writer has flushed."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            tf.summary.flush()  # the callback's train writer is the default one inside fit
            raise KeyboardInterrupt


def fit(model, log_dir, epochs, losses, seed, extra=(), **kwargs):
    """`model.fit` with the callbacks `bert-keras pretrain` uses; returns History.history."""
    x, y = tiny_data(seed)
    tensorboard = keras.callbacks.TensorBoard(str(log_dir), **kwargs)
    callbacks = [
        keras.callbacks.BackupAndRestore(str(log_dir.parent.parent / "backup" / log_dir.name), delete_checkpoint=False),
        tensorboard,
        BatchLosses(losses),
        *extra,
    ]
    try:
        history = model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    except KeyboardInterrupt:
        tensorboard.on_train_end()  # a dead process leaves no writer behind; this one lives on
        raise
    return history.history


def close(points, expected):
    """(step, value) pairs equal to `expected`'s, values up to float32 rounding."""
    assert [step for step, _ in points] == [step for step, _ in expected]
    np.testing.assert_allclose([v for _, v in points], [v for _, v in expected], rtol=1e-6)


def test_two_phases_steps_and_values_match_what_keras_reported(tmp_path):
    keras.utils.set_random_seed(0)
    model = tiny_model()
    losses1, losses2 = {}, {}
    history1 = fit(model, tmp_path / "logs" / "phase1", 3, losses1, seed=1, update_freq=1)
    history2 = fit(model, tmp_path / "logs" / "phase2", 2, losses2, seed=2, update_freq=1)

    curves = read_curves(tmp_path)
    assert curves.phases == [("phase1", 0, 12, "step"), ("phase2", 12, 20, "step")]
    assert curves.x_label == "step"
    assert set(curves.series) == {"loss", "mae", "learning_rate"}
    loss = curves.series["loss"]
    # Epoch values sit on each epoch's last step; phase 2 continues after phase 1's 12 steps.
    close(
        loss[("train", "epoch")],
        [(4 * (e + 1), v) for e, v in enumerate(history1["loss"])]
        + [(12 + 4 * (e + 1), v) for e, v in enumerate(history2["loss"])],
    )
    close(loss[("train", "step")], sorted(losses1.items()) + [(12 + step, v) for step, v in sorted(losses2.items())])
    close(curves.series["mae"][("train", "epoch")][:3], [(4 * (e + 1), v) for e, v in enumerate(history1["mae"])])
    close(curves.series["learning_rate"][("train", "epoch")][:3], [(4, 0.05), (8, 0.05), (12, 0.05)])


def test_resumed_run_continues_the_step_axis(tmp_path):
    """BackupAndRestore restarts Keras's batch numbering at 1; the plot puts the resumed
    attempt after the last finished epoch and keeps its values for the redone steps."""
    keras.utils.set_random_seed(0)
    log_dir = tmp_path / "logs" / "phase1"
    losses = {}
    with pytest.raises(KeyboardInterrupt):
        fit(tiny_model(), log_dir, 3, losses, seed=1, extra=[Interrupt(epoch=1, batch=2)], update_freq=1)
    assert max(losses) == 7  # died at step 7, after epoch 0 (steps 1-4) was backed up
    history = fit(tiny_model(), log_dir, 3, losses, seed=1, update_freq=1)  # resumes at epoch 1
    assert len(list(log_dir.joinpath("train").iterdir())) == 2

    curves = read_curves(tmp_path)
    assert curves.phases == [("phase1", 0, 12, "step")]
    close(curves.series["loss"][("train", "step")], sorted(losses.items()))
    assert [step for step, _ in curves.series["loss"][("train", "epoch")]] == [4, 8, 12]
    close(curves.series["loss"][("train", "epoch")][1:], [(8, history["loss"][0]), (12, history["loss"][1])])


def test_epoch_level_logs_with_validation_and_the_png(tmp_path, capsys):
    """The `bert-keras finetune` layout: epoch summaries only, train and validation."""
    keras.utils.set_random_seed(0)
    x, y = tiny_data(3)
    history = (
        tiny_model()
        .fit(
            x,
            y,
            batch_size=BATCH,
            epochs=3,
            validation_data=tiny_data(4),
            verbose=0,
            callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "logs"))],
        )
        .history
    )

    curves = read_curves(tmp_path)
    assert curves.phases == [("", 0, 3, "epoch")]
    assert curves.x_label == "epoch"
    for metric in ("loss", "mae"):
        close(curves.series[metric][("train", "epoch")], list(enumerate(history[metric], start=1)))
        close(curves.series[metric][("validation", "epoch")], list(enumerate(history[f"val_{metric}"], start=1)))

    output = tmp_path / "plots" / "curves.png"
    assert cli.main(["plot", str(tmp_path), "--output", str(output)]) == 0
    assert str(output) in capsys.readouterr().out
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(output) as image:
        panels = 3  # loss, mae, learning_rate
        columns = min(COLUMNS, panels)
        assert image.size == (
            round(PANEL_INCHES[0] * columns * DPI),
            round(PANEL_INCHES[1] * math.ceil(panels / columns) * DPI),
        )
        pixels = np.asarray(image.convert("L"))
    assert (pixels < 128).mean() > 0.01  # curves, axes and text were drawn


def test_step_and_epoch_runs_under_one_folder(tmp_path):
    """A folder holding a pre-training run (per step) and a fine-tuning run (per epoch):
    both on one axis, in the order they ran, the axis label saying which is which."""
    keras.utils.set_random_seed(0)
    fit(tiny_model(), tmp_path / "pretrain" / "logs" / "phase1", 2, {}, seed=1, update_freq=2)
    x, y = tiny_data(2)
    history = (
        tiny_model()
        .fit(
            x,
            y,
            batch_size=BATCH,
            epochs=2,
            verbose=0,
            callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "finetune" / "logs"))],
        )
        .history
    )

    curves = read_curves(tmp_path)
    assert curves.phases == [("pretrain/logs/phase1", 0, 8, "step"), ("finetune/logs", 8, 10, "epoch")]
    assert curves.x_label == "step; epoch in finetune/logs"
    close(curves.series["loss"][("train", "epoch")][2:], [(9, history["loss"][0]), (10, history["loss"][1])])


def test_default_output_lands_in_the_run_folder(tmp_path, capsys):
    x, y = tiny_data(5)
    tiny_model().fit(
        x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "logs"))]
    )
    assert cli.main(["plot", str(tmp_path)]) == 0
    assert (tmp_path / "training_curves.png").stat().st_size > 0
    assert str(tmp_path / "training_curves.png") in capsys.readouterr().out


def test_a_folder_without_logs_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    assert cli.main(["plot", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "no TensorBoard logs" in error and str(tmp_path) in error
    assert cli.main(["plot", str(tmp_path / "missing")]) == 2
    assert f"no run folder {tmp_path / 'missing'}" in capsys.readouterr().err


def test_a_run_stopped_inside_an_epoch_ends_on_its_last_step(tmp_path):
    """`pretrain`'s callbacks: 10 steps in epochs of 4 logged every 3 steps. The plot ends at
    step 10 (not 9, the last multiple of 3) and each epoch's figures sit on its last step."""
    from bert_keras.training.callbacks import StopAfterSteps, TensorBoard

    keras.utils.set_random_seed(0)
    x, y = tiny_data(1)
    callbacks = [TensorBoard(str(tmp_path / "logs" / "phase1"), update_freq=3), StopAfterSteps(10, STEPS_PER_EPOCH)]
    history = tiny_model().fit(x, y, batch_size=BATCH, epochs=3, validation_data=(x, y), verbose=0, callbacks=callbacks)

    curves = read_curves(tmp_path)
    assert curves.phases == [("phase1", 0, 10, "step")]
    assert [step for step, _ in curves.series["loss"][("train", "step")]] == [3, 4, 6, 8, 9, 10]
    close(curves.series["loss"][("validation", "epoch")], list(zip([4, 8, 10], history.history["val_loss"])))


def test_a_plain_fit_with_evaluation_summaries_gets_the_breakdown_panels(tmp_path, capsys):
    """`EvaluationSummaries` in any `fit`: the report of each epoch lands in evaluations/ and
    the plot draws the last one's confusion matrix and table, class names that look like
    TeX or HTML drawn as text."""
    from bert_keras.training.evaluation_summaries import EvaluationReport, EvaluationSummaries, read_report

    labels = ["$\\foo{$", "<b>b</b>"]
    scores = {"precision": 0.5, "recall": 1.0, "f1": 2 / 3}
    report = EvaluationReport(labels, {label: scores for label in labels}, [[2, 0], [1, 1]])
    x, y = tiny_data(6)
    callbacks = [keras.callbacks.TensorBoard(str(tmp_path / "logs")), EvaluationSummaries(lambda: report, tmp_path)]
    tiny_model().fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=callbacks)
    assert read_report(tmp_path, 1) == read_report(tmp_path, 2) == report
    assert cli.main(["plot", str(tmp_path)]) == 0
    assert "with the per-class scores of epoch 2 and its confusion matrix" in capsys.readouterr().out
    assert set(read_curves(tmp_path).series) == {"loss", "mae", "learning_rate"}  # no per-class curves
    panels = 3 + 2  # the curves, then the confusion matrix and the table
    with Image.open(tmp_path / "training_curves.png") as image:
        assert image.size == (
            round(PANEL_INCHES[0] * COLUMNS * DPI),
            round(PANEL_INCHES[1] * math.ceil(panels / COLUMNS) * DPI),
        )

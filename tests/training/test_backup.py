"""`StepBackup` and `prune_logs` leave whole files when killed at any moment: a backup killed
at any of its writes restores the newest or the previous step exactly, and pruned logs keep
every event until their rewrite is whole."""

import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.training import backup as backup_module
from bert_keras.training.backup import StepBackup, prune_logs


class Killed(Exception):
    """Stands for the SIGKILL that stops a process at one of its writes."""


def tiny_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dropout(0.2), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.1), loss="mse")
    return model


def batches():
    rows = np.random.RandomState(0).rand(8, 3).astype("float32")
    return tf.data.Dataset.from_tensor_slices((rows, rows[:, :2] * 2)).batch(2).repeat()


class Recorder(keras.callbacks.Callback):
    """The weights after each step (listed before the backup, it sees the step the backup saves)."""

    def __init__(self, weights):
        super().__init__()
        self.weights = weights

    def on_epoch_end(self, epoch, logs=None):
        self.weights[int(self.model.optimizer.iterations.numpy())] = self.model.get_weights()


def train(folder, epochs, weights):
    """Resumes from `folder` and trains one-step epochs up to `epochs` steps."""
    model = tiny_model()
    backup = StepBackup(folder)
    done = backup.restore(model)
    try:
        model.fit(
            batches(),
            initial_epoch=done,
            epochs=epochs,
            steps_per_epoch=1,
            verbose=0,
            callbacks=[Recorder(weights), backup],
        )
    finally:
        backup.on_train_end()


def restored(folder):
    model = tiny_model()
    step = StepBackup(folder).restore(model)
    return step, model.get_weights()


def killed_at(monkeypatch, write=None, before=None):
    """Patches the backup's writes (`save_weights`, which then leaves half a file, and
    `os.replace`) to raise `Killed` at the `write`-th, or at the one that writes `before`
    (a file name). Returns the list of the names written so far."""
    writes = []
    save_weights, replace = keras.Model.save_weights, os.replace

    def dies(target):
        writes.append(os.path.basename(target))
        return len(writes) == write or writes[-1] == before

    def dying_save_weights(self, filepath, *args, **kwargs):
        save_weights(self, filepath, *args, **kwargs)
        if dies(filepath):
            with open(filepath, "r+b") as file:
                file.truncate(os.path.getsize(filepath) // 2)
            raise Killed

    def dying_replace(source, target):
        if dies(target):
            raise Killed
        replace(source, target)

    monkeypatch.setattr(keras.Model, "save_weights", dying_save_weights)
    monkeypatch.setattr(backup_module.os, "replace", dying_replace)
    return writes


@pytest.mark.slow
def test_a_backup_killed_at_any_write_restores_the_newest_or_previous_step(tmp_path, monkeypatch):
    weights = {}
    train(tmp_path / "two_steps", 2, weights)
    kills = 0
    for write in range(1, 10):
        folder = tmp_path / f"killed_at_{write}"
        shutil.copytree(tmp_path / "two_steps", folder)
        with monkeypatch.context() as patch:
            writes = killed_at(patch, write)
            try:
                train(folder, 3, weights)
            except Killed:
                kills += 1
        step, restored_weights = restored(folder)
        expected = 3 if len(writes) < write else 2
        assert step == expected, f"killed at write {write}: restored step {step}, not {expected}"
        for got, want in zip(restored_weights, weights[step], strict=True):
            np.testing.assert_array_equal(got, want)
    assert 0 < kills < 9  # every write was killed once, and a save ran whole


def test_a_run_resumed_from_the_previous_backup_keeps_it_until_a_save_is_whole(tmp_path, monkeypatch):
    """Killed before its state was written, the newest backup's weights are a step ahead of its
    state: the run resumes from the previous backup, and a kill in its next save must not
    make that one the previous of an inconsistent pair."""
    weights = {}
    folder = tmp_path / "run"
    train(folder, 2, weights)
    for _ in range(2):
        with monkeypatch.context() as patch:
            killed_at(patch, before="state.json")
            with pytest.raises(Killed):
                train(folder, 3, weights)
        step, restored_weights = restored(folder)
        assert step == 2
        for got, want in zip(restored_weights, weights[2], strict=True):
            np.testing.assert_array_equal(got, want)
    train(folder, 4, weights)
    assert restored(folder)[0] == 4
    StepBackup(folder).remove()
    assert not folder.exists()


def events(path):
    return [
        (event.step, [value.tag for value in event.summary.value])
        for event in (tf.compat.v1.Event.FromString(record.numpy()) for record in tf.data.TFRecordDataset(str(path)))
        if event.summary.value
    ]


def test_prune_logs_killed_mid_rewrite_keeps_every_event(tmp_path, monkeypatch):
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        for step in range(1, 5):
            tf.summary.scalar("batch_loss", float(step), step=step)
    (path,) = tmp_path.glob("events.out.tfevents.*")
    written = events(path)
    assert [step for step, _ in written] == [1, 2, 3, 4]

    class DyingWriter(tf.io.TFRecordWriter):
        def write(self, record):
            super().write(record)
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(tf.io, "TFRecordWriter", DyingWriter)
        with pytest.raises(Killed):
            prune_logs(tmp_path, steps=2, epochs=0)
    assert events(path) == written
    prune_logs(tmp_path, steps=2, epochs=0)
    assert [step for step, _ in events(path)] == [1, 2]
    assert [file.name for file in tmp_path.iterdir()] == [path.name]

"""Callbacks of the fine-tuning and pre-training runs, for any `model.fit`.

The official metric after every epoch with the best weights kept, a wall-clock budget,
a step limit inside the last epoch, and TensorBoard logs that keep every epoch's
held-out metrics.
"""

import time
from pathlib import Path

import keras
import numpy as np

# Every epoch's metrics and last step in TensorBoard, held-out ones included (a private Keras hook).
from bert_keras.compat import TensorBoard as TensorBoard


class StopAfterSteps(keras.callbacks.Callback):
    """Ends training after `steps` optimizer steps in all when every epoch is
    `steps_per_epoch` steps: the last epoch is then shorter (a run of 300 steps
    checkpointed every 1000). Counted by the optimizer, so a resumed run stops where the
    uninterrupted one would."""

    def __init__(self, steps, steps_per_epoch):
        super().__init__()
        self.steps, self.steps_per_epoch = steps, steps_per_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        done = int(self.model.optimizer.iterations.numpy())
        if done >= self.steps:
            self.model.stop_training = True
            ran = done - self.epoch * self.steps_per_epoch
            if ran < self.steps_per_epoch:  # Keras' progress bar then shows the planned length
                print(f"\nstopping after batch {self.steps}: this epoch ran {ran} of its {self.steps_per_epoch}")


class EvaluateAtStep(keras.callbacks.Callback):
    """Once, right after optimizer step `step`: `report(evaluate(model), step)`, which may
    raise to end the run there (a search discarding a trial early). A run resumed past
    `step` does not evaluate again."""

    def __init__(self, step, evaluate, report):
        super().__init__()
        self.step, self.evaluate, self.report = step, evaluate, report

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step == self.step:
            self.report(self.evaluate(self.model), step)


class TimeBudget(keras.callbacks.Callback):
    """Ends training (the epoch's evaluation still runs) once `minutes` of training have
    passed (none: never), counting the time before a resume; `seconds` is that time."""

    def __init__(self, minutes=None):
        super().__init__()
        self.minutes = minutes
        self.earlier = 0.0
        self.start = None

    @property
    def seconds(self):
        return self.earlier + (0.0 if self.start is None else time.perf_counter() - self.start)

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_end(self, logs=None):
        self.earlier, self.start = self.seconds, None

    def backup_state(self, folder):
        return {"seconds": self.seconds}

    def restore_state(self, folder, state):
        self.earlier = state["seconds"]

    def on_train_batch_end(self, batch, logs=None):
        if self.minutes is not None and self.seconds > 60 * self.minutes:
            # Keras's progress bar then shows the epoch's planned length, not this step.
            print(f"\ntime budget of {self.minutes} min reached: stopping after step {batch + 1} of this epoch")
            self.model.stop_training = True


class EvaluateAndKeepBest(keras.callbacks.Callback):
    """After each epoch, puts `evaluate(model) -> {metric: value}` into the logs (so the
    progress bar and TensorBoard show the official metrics) and keeps a copy of the
    weights in `best_weights` when `main_metric` improves (in memory: a run writes its
    model once, at the end, without a second file of the same size). `best` and
    `history` hold the best epoch's and every epoch's metrics. `on_best(metrics)`, if
    given, runs when an epoch becomes the best: the hook that writes that epoch's
    predictions (SQuAD, CoNLL), so no caller keeps a best score of its own."""

    def __init__(self, evaluate, main_metric, on_best=None):
        super().__init__()
        self.evaluate, self.main_metric, self.on_best = evaluate, main_metric, on_best
        self.best = None
        self.best_weights = None
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        metrics = self.evaluate(self.model)
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in metrics.items()})
        metrics = {"epoch": epoch + 1, **metrics}
        self.history.append(metrics)
        print(
            " - ".join(
                f"{name}: {value:.4f}" if isinstance(value, float) else f"{name}: {value}"
                for name, value in metrics.items()
            )
        )
        if self.best is None or metrics[self.main_metric] > self.best[self.main_metric]:
            self.best = metrics
            self.best_weights = self.model.get_weights()
            if self.on_best is not None:
                self.on_best(metrics)

    def backup_state(self, folder):
        """The metrics so far and the best weights, as `best-<epoch>.npz` in `folder` (for `StepBackup`)."""
        if self.best is None:
            return {"history": self.history, "best": None, "files": []}
        name = f"best-{self.best['epoch']}.npz"
        if not (Path(folder) / name).exists():
            temporary = Path(folder) / f"{name}.tmp.npz"
            np.savez(temporary, *self.best_weights)
            temporary.replace(Path(folder) / name)
        return {"history": self.history, "best": self.best, "files": [name]}

    def restore_state(self, folder, state):
        self.history, self.best = list(state["history"]), state["best"]
        if self.best is not None:
            with np.load(Path(folder) / state["files"][0]) as arrays:
                self.best_weights = [arrays[f"arr_{index}"] for index in range(len(arrays.files))]

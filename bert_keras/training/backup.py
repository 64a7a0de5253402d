"""Step-level backups: any `model.fit` run killed at any moment resumes where it stopped.

`StepBackup` backs up every `save_freq` optimizer steps, at every epoch end and on
SIGTERM (then the process exits): the weights and optimizer state (`latest.weights.h5`)
and what a weights file lacks, in `state.json`: the step, the whole epochs trained, the
seed generators' states (dropout masks), the epoch's running metrics, and the state of the
callbacks given as `states` (best-so-far metrics and weights, elapsed time). The backup
before it is kept (`previous.weights.h5`, `state.json.bkp`), and every file is written
under a temporary name and then renamed, so a kill at any moment leaves the newest or the
previous backup whole. `restore` loads the newest backup that reads whole, before `fit`:
the caller skips as many batches of its deterministic data as the restored optimizer has
trained and fits the rest, so the run ends as an uninterrupted one would. `prune_logs`
drops the TensorBoard events written after that backup, so no step is logged twice.
"""

import json
import os
import signal
import sys
import threading
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bert_keras import run_identity
from bert_keras.compat import builds_from_fit_data, needs_symbolic_build

STATE = "state.json"
WEIGHTS = "latest.weights.h5"
BACKUP = ".bkp"
# Keras saves and loads weights only under names that end in `.weights.h5`.
PREVIOUS_WEIGHTS = "previous.weights.h5"
SAVING_WEIGHTS = "saving.weights.h5"
PRUNING_LOGS = "pruned_events.tmp"


class StepBackup(keras.callbacks.Callback):
    """Backs up to `backup_dir` every `save_freq` optimizer steps ("epoch": at epoch ends
    only; an epoch's last step is backed up at its end, after the epoch's callbacks) and on
    SIGTERM when `on_sigterm` (not under multi-worker training, where every worker must save
    together). `states`: name -> object with `backup_state(folder) -> dict` (JSON; its
    "files", `.npz` in `folder`, are kept) and `restore_state(folder, state)`. `plan`: the run's
    settings (JSON) and `inputs` the files it reads (name -> paths: `run_identity`), which a
    resumed run must repeat. `batches_per_step`: batches a step takes (gradient accumulation)."""

    def __init__(
        self, backup_dir, save_freq="epoch", states=None, plan=None, inputs=None, on_sigterm=True, batches_per_step=1
    ):
        super().__init__()
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0):
            raise ValueError(f"save_freq must be 'epoch' or a number of steps above 0, got {save_freq!r}")
        self.backup_dir, self.save_freq = str(backup_dir), save_freq
        self.states, self.plan = dict(states or {}), json.loads(json.dumps(plan))  # as read back
        self.identity = run_identity.job_identity(self.plan or {}, inputs)
        self.step = 0
        self.on_sigterm, self.batches_per_step = on_sigterm, batches_per_step
        self.finished, self.terminated = False, False
        self.resumes_metrics = None
        self.epoch = 0
        # Whether state.json and latest.weights.h5 are one backup (restored or saved here):
        # only then does a save keep them as the previous one.
        self._latest_is_whole = False
        self._previous_handler = None

    def restore(self, model):
        """Loads the newest whole backup into `model` (compiled, built; in its strategy's
        scope) and the `states`. Returns the optimizer steps it holds (0: none). Sets
        `finished` when the run had stopped (all steps trained, or a callback stopped it)."""
        folder = Path(self.backup_dir)
        for state_name, weights_name in ((STATE, WEIGHTS), (STATE + BACKUP, PREVIOUS_WEIGHTS)):
            state = _read_json(folder / state_name)
            if state is None or not (folder / weights_name).exists():
                continue
            self._check_plan(state)
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            try:
                model.load_weights(str(folder / weights_name))
            except (OSError, ValueError):
                continue
            if _steps(model) != state["step"]:  # killed between the weights and their state
                continue
            for variable, value in zip(_seed_variables(model), state["seeds"], strict=True):
                variable.assign(value)
            for name, keeper in self.states.items():
                keeper.restore_state(folder, state[name])
            self.resumes_metrics = None if state["epoch_end"] else state["metrics"]
            self.finished, self.step = state["finished"], state["step"]
            self._latest_is_whole = weights_name == WEIGHTS
            return self.step
        return 0

    def remove(self):
        """Deletes the backups (the run is over and written), and the folder if nothing else is in it."""
        folder = Path(self.backup_dir)
        for pattern in (f"{STATE}*", "*.weights.h5", "*.npz"):
            for path in folder.glob(pattern):
                path.unlink()
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def _check_plan(self, state):
        remedy = "resume with the same settings and files, or start over in an empty folder"
        run_identity.check(state.get("identity"), self.identity, self.backup_dir, remedy)

    def on_train_begin(self, logs=None):
        """No load here (`restore` did it, before the data was built); SIGTERM is caught."""
        self._batches = _steps(self.model) * self.batches_per_step
        if self.on_sigterm and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._terminate)

    def on_train_end(self, logs=None):
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def _terminate(self, signum, frame):
        self.terminated = True  # backed up after this step (an epoch's last: after its evaluation)

    def on_epoch_begin(self, epoch, logs=None):
        """A run resumed inside an epoch goes on with that epoch's running metrics."""
        self.epoch = epoch
        if self.resumes_metrics is not None:
            for variable, value in zip(self.model.metrics_variables, self.resumes_metrics, strict=True):
                variable.assign(value)
            self.resumes_metrics = None

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        step, within = divmod(self._batches, self.batches_per_step)
        last_of_epoch = batch + 1 == self.params.get("steps")
        due = isinstance(self.save_freq, int) and step % self.save_freq == 0
        # A stopped run's or an epoch's last step is backed up at the epoch's end, after its evaluation.
        waiting = within or last_of_epoch or self.model.stop_training
        if not waiting and (due or self.terminated):
            self._save(epoch_end=False)
        self._exit_if_terminated(waiting)

    def on_epoch_end(self, epoch, logs=None):
        self.epoch = epoch + 1
        self._save(epoch_end=True)
        self._exit_if_terminated(False)

    def _exit_if_terminated(self, waiting):
        if self.terminated and not waiting:
            print(
                f"\nSIGTERM: backed up after step {_steps(self.model)} to {self.backup_dir}; "
                "run again with the same arguments to resume",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(128 + signal.SIGTERM)

    def _save(self, epoch_end):
        """Every worker saves (reading distributed variables is collective). Written and
        renamed in an order that leaves a whole backup at any moment: a state and weights of
        different steps are not one (`restore` skips them)."""
        folder = Path(self.backup_dir)
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "step": _steps(self.model),
            "epoch": self.epoch,
            "epoch_end": epoch_end,
            "finished": bool(epoch_end and self.model.stop_training),
            "identity": self.identity,
            "seeds": [np.asarray(v).tolist() for v in _seed_variables(self.model)],  # in the model's order
            "metrics": [np.asarray(v).tolist() for v in self.model.metrics_variables],
            **{name: keeper.backup_state(folder) for name, keeper in self.states.items()},
        }
        self.model.save_weights(str(folder / SAVING_WEIGHTS))
        if self._latest_is_whole:
            _write_json(folder / (STATE + BACKUP), _read_json(folder / STATE))
            os.replace(folder / WEIGHTS, folder / PREVIOUS_WEIGHTS)
        os.replace(folder / SAVING_WEIGHTS, folder / WEIGHTS)
        _write_json(folder / STATE, state)
        self._latest_is_whole = True
        _remove_unlisted(folder, [state, _read_json(folder / (STATE + BACKUP)) or {}], self.states)


def fit_from_backup(model, backup, batches, *, steps, epochs, steps_per_epoch, callbacks, **options):
    """`model.fit` of the batches after those `backup` restored (`StepBackup.restore`
    first), out of `steps` batches in `epochs` of `steps_per_epoch`: the rest of the epoch
    a backup stopped inside is one `fit`, the whole epochs after it another, each on
    `batches(skip)` (the training data after its first `skip` batches) with `callbacks()`
    and `backup` last (an epoch's backup holds what its callbacks did). `options` go to
    `fit`. Returns one `History` of the epochs trained."""
    done = backup.step * backup.batches_per_step
    fits = []
    if not backup.finished and done < steps:
        epoch, into = divmod(done, steps_per_epoch)
        if into:
            fits.append((epoch, epoch + 1, steps_per_epoch - into))
        fits.append((epoch + bool(into), epochs, steps_per_epoch))
    joined = keras.callbacks.History()
    joined.history, joined.epoch = {}, []
    try:
        for first, last, epoch_steps in fits:
            if first >= last:
                break
            skip = first * steps_per_epoch + steps_per_epoch - epoch_steps
            resumes = backup.resumes_metrics and len(model.metrics_variables) != len(backup.resumes_metrics)
            if resumes or (builds_from_fit_data(model) and needs_symbolic_build(model)):
                # Builds the metrics Keras builds in the first step (or, under a strategy, from a
                # batch of `fit`'s data), on data of its own: a second iterator of one dataset
                # would shuffle anew.
                model.evaluate(batches(skip), steps=1, verbose=0)
            history = model.fit(
                batches(skip),
                initial_epoch=first,
                epochs=last,
                steps_per_epoch=epoch_steps,
                callbacks=[*callbacks(), backup],
                **options,
            )
            joined.epoch += history.epoch
            for name, values in history.history.items():
                joined.history.setdefault(name, []).extend(values)
            if model.stop_training:
                break
    finally:
        backup.on_train_end()  # SIGTERM is the process's again, also after an error in `fit`
    return joined


def _steps(model):
    return int(model.optimizer.iterations.numpy())


def _seed_variables(model):
    """The seed generators' states (dropout): variables a weights file does not hold."""
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _write_json(path, content):
    """Written whole or not at all: a kill mid-write leaves the old file."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(content))
    os.replace(temporary, path)


def _remove_unlisted(folder, states, names):
    """Removes the callbacks' files (`.npz`) that neither backup lists any more."""
    kept = {file for state in states for name in names for file in (state.get(name) or {}).get("files", ())}
    for path in folder.glob("*.npz"):
        if path.name not in kept:
            path.unlink()


def prune_logs(folder, steps, epochs):
    """Drops the TensorBoard scalars under `folder` written after a backup of `steps`
    steps and `epochs` whole epochs: epoch summaries (numbered by epoch) from epoch
    `epochs` on, the others (numbered by step) after `steps`."""
    for path in sorted(Path(folder).rglob("events.out.tfevents.*")):
        events, dropped = [], False
        try:
            for record in tf.data.TFRecordDataset(str(path)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                tags = [value.tag for value in event.summary.value]
                if tags and any(_after(tag, event.step, steps, epochs) for tag in tags):
                    dropped = True
                    continue
                events.append(record.numpy())
        except tf.errors.DataLossError:  # a record cut short by the kill
            dropped = True
        if dropped:
            # No "tfevents" in the temporary name: TensorBoard would read a file a kill left.
            temporary = path.with_name(PRUNING_LOGS)
            with tf.io.TFRecordWriter(str(temporary)) as writer:
                for record in events:
                    writer.write(record)
            os.replace(temporary, path)


def _after(tag, step, steps, epochs):
    return step >= epochs if tag.startswith("epoch_") else step > steps

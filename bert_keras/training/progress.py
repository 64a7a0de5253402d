"""Progress that reads well where it lands: Keras' bar on a terminal, plain lines elsewhere.

Keras' progress bar redraws one line with `\\r`, backspaces and colour codes; written to a
file or a pipe (a log, CI, `| tee`) that becomes one line of several kilobytes. When the
output is not a terminal, `fit_progress` turns the bar off and `PlainProgress` prints a
line every `every_seconds` and at each epoch's end; `progress_bar` does the same for a
count of items (`BertTextEmbedder.encode`).
"""

import sys
import time

import keras


def is_terminal(stream=None):
    stream = sys.stdout if stream is None else stream
    return hasattr(stream, "isatty") and stream.isatty()


def metrics_text(logs):
    return "".join(f" - {name}: {value:.4g}" for name, value in (logs or {}).items() if _is_number(value))


def _is_number(value):
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


class ProgressLines:
    """`update(done)` prints "`label`done/total units, time (rate)" at most every
    `every_seconds`, and when `done` reaches `total` or `force`; `add(n)` as Keras' `Progbar.add`."""

    def __init__(self, total, unit_name="step", label="", every_seconds=30.0, stream=None):
        self.total, self.unit_name, self.label = total, unit_name, label
        self.every_seconds, self.stream = every_seconds, stream
        self.start = self.last = time.perf_counter()
        self.done = 0

    def update(self, done, suffix="", force=False):
        self.done = done
        now = time.perf_counter()
        if not force and now - self.last < self.every_seconds and not (self.total and done >= self.total):
            return
        self.last = now
        seconds = now - self.start
        total = f"/{self.total}" if self.total else ""
        rate = f"{done / seconds:.3g} {self.unit_name}s/s" if seconds > 0 else "-"
        line = f"{self.label}{done}{total} {self.unit_name}s, {seconds:.0f}s ({rate}){suffix}"
        print(line, file=self.stream or sys.stdout, flush=True)

    def add(self, count):
        self.update(self.done + count)


class PlainProgress(keras.callbacks.Callback):
    """`fit` progress as plain lines: Keras' "Epoch 2/5" as each epoch begins, then
    "120/333 steps, 41s (2.9 steps/s) - loss: 2.31" every `every_seconds`, and a line at
    the epoch's end with its held-out metrics (and the steps it ran, fewer than planned
    when training stopped inside it)."""

    def __init__(self, every_seconds=30.0):
        super().__init__()
        self.every_seconds = every_seconds

    def on_epoch_begin(self, epoch, logs=None):
        print(f"Epoch {epoch + 1}/{self.params.get('epochs')}", flush=True)
        self.lines = ProgressLines(self.params.get("steps"), every_seconds=self.every_seconds)
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen = batch + 1
        if self.seen != self.lines.total:  # the epoch's last line waits for its held-out metrics
            self.lines.update(self.seen, metrics_text(logs))

    def on_epoch_end(self, epoch, logs=None):
        self.lines.update(self.seen, metrics_text(logs), force=True)


def fit_progress(verbose="auto", every_seconds=30.0):
    """(`verbose` for `fit`, extra callbacks): Keras' bar (verbose 1 or "auto") on a terminal;
    where stdout is not one, no bar and `PlainProgress` lines instead. 0 and 2 stay as given."""
    if verbose in (1, "auto") and not is_terminal():
        return 0, [PlainProgress(every_seconds)]
    return verbose, []


def progress_bar(total, unit_name="step", verbose=1, every_seconds=30.0):
    """`keras.utils.Progbar(total, verbose=verbose)`, but `ProgressLines` for verbose 1 where
    stdout is not a terminal: both take `add(n)`."""
    if verbose == 1 and not is_terminal():
        return ProgressLines(total, unit_name=unit_name, every_seconds=every_seconds)
    return keras.utils.Progbar(total, verbose=verbose, unit_name=unit_name)

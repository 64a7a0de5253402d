"""Peak memory and step time of short training runs, each setting in a process of its
own (a peer of `bench.measure.run_peer`, run with this Python): peak resident memory
(`ru_maxrss`) is a process's high-water mark, so settings run in one process would all
report the largest."""

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path

from bench.measure import answer_peer, run_peer


def step_timer():
    """A Keras callback that keeps the wall time at the start of training and at the end
    of every step, in `.times`."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        times = []

        def on_train_begin(self, logs=None):
            self.times.append(time.perf_counter())

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    return StepTimer()


def tensor_memory():
    """TensorFlow's CPU allocator: the GB its tensors held at most and hold now (after
    training: the weights and optimizer state). Peak RSS minus the peak is the runtime,
    Python and memory the allocator keeps after tensors are freed."""
    import tensorflow as tf

    info = tf.config.experimental.get_memory_info("CPU:0")
    return {"tensor_peak_gb": info["peak"] / 2**30, "tensor_now_gb": info["current"] / 2**30}


def step_figures(timer, skip, **figures):
    """This process's answer: the seconds of each step after the first `skip` (which trace
    and warm up), peak RSS and tensor memory in GB, and `figures`."""
    steps = [b - a for a, b in zip(timer.times[skip:], timer.times[skip + 1 :])]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    return {"step_seconds": steps, "peak_rss_gb": peak, **tensor_memory(), **figures}


def stop_above(limit_gb):
    """Ends this process, saying so on stderr, once its resident memory passes `limit_gb`
    (checked every 0.1 s): a run on a shared machine stays within its share."""
    page = os.sysconf("SC_PAGE_SIZE")

    def watch():
        while True:
            resident = int(Path("/proc/self/statm").read_text().split()[1]) * page / 2**30
            if resident > limit_gb:
                print(f"stopped at {resident:.2f} GB, above {limit_gb} GB", file=sys.stderr, flush=True)
                os._exit(3)
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()


def run_setting(script, job):
    """Runs one setting of `script` in a new Python process: `job` (the settings, as
    `answer_setting` reads them) in, its `step_figures` out, or {"error": the last lines
    of its output} when it fails (a kill for memory included)."""
    try:
        return run_peer(sys.executable, script, {**job, "peer": "setting"})
    except RuntimeError as error:
        return {"error": " | ".join(str(error).strip().splitlines()[-5:])}


def answer_setting(train):
    """The process `run_setting` starts: `train(the job as an argparse.Namespace)` answers."""
    answer_peer({"setting": lambda job: train(argparse.Namespace(**job))})

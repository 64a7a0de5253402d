"""Peak memory and step time of short training runs, each setting in a process of its
own: peak resident memory (`ru_maxrss`) is a process's high-water mark, so settings run
in one process would all report the largest."""

import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

RESULT = "RESULT "


def cpu():
    """`lscpu`'s model name and the cores this process may use."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {len(os.sched_getaffinity(0))} cores"
    return platform.processor()


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


def report(timer, skip, **figures):
    """Prints this process's result line: seconds per step (the median after the first
    `skip` steps, which trace and warm up), peak RSS and tensor memory in GB, and `figures`."""
    steps = sorted(b - a for a, b in zip(timer.times[skip:], timer.times[skip + 1 :]))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    result = {"seconds_per_step": steps[len(steps) // 2], "peak_rss_gb": peak, "steps_timed": len(steps)}
    result.update(tensor_memory(), **figures)
    print(RESULT + json.dumps(result), flush=True)


def stop_above(limit_gb):
    """Ends this process, with a result line saying so, once its resident memory passes
    `limit_gb` (checked every 0.1 s): a run on a shared machine stays within its share."""
    page = os.sysconf("SC_PAGE_SIZE")

    def watch():
        while True:
            resident = int(Path("/proc/self/statm").read_text().split()[1]) * page / 2**30
            if resident > limit_gb:
                print(RESULT + json.dumps({"error": f"stopped at {resident:.2f} GB, above {limit_gb} GB"}), flush=True)
                os._exit(3)
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()


def run_setting(script, arguments):
    """Runs `script` with `arguments` in a new Python process; returns its result line
    (a dict), or {"error": the last lines of its output} when it fails (a kill for memory
    included)."""
    process = subprocess.run([sys.executable, str(script), *arguments], capture_output=True, text=True)
    for line in process.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    tail = (process.stdout + process.stderr).strip().splitlines()[-5:]
    return {"error": f"exit {process.returncode}: " + " | ".join(tail)}

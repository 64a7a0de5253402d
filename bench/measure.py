"""What every bench script shares: timers and interleaved timing rounds, the machine and its
load, peer runs in another Python (training settings each in a process of its own, for their
peak memory), and the one result schema `--json PATH` writes.

Standard library only at import: a peer script imports this module in a side environment
that may have nothing but its own packages (Keras and TensorFlow are imported by the
helpers that need them).

The schema:

    {"bench": NAME, "machine": {...}, "settings": {...},
     "results": [{"name", "unit", "median", "spread": [q1, q3], "rounds", ...}]}
"""

import argparse
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ANSWER = "peer answer: "
PEAK_MARK = "peak resident KiB: "
# The CPU flags the deploy, serving and training paths depend on.
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")


def cpu_fields():
    """`lscpu`'s fields, or /proc/cpuinfo's where lscpu is missing."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        text = Path("/proc/cpuinfo").read_text().replace("model name", "Model name").replace("flags", "Flags")
    return {
        key.strip(): value.strip() for key, value in (line.split(":", 1) for line in text.splitlines() if ":" in line)
    }


def load_average():
    return list(os.getloadavg())


def peak_rss_mb():
    """This process's peak resident memory in MiB (ru_maxrss: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resident_mb(pid="self", field="VmRSS"):
    """A process's resident memory in MiB from /proc: VmRSS now, or VmHWM, its peak (which
    `peak_rss_mb` is not in a process started by exec: Linux carries ru_maxrss over)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine():
    """The CPU, its cores and flags, and the load average now (`load_start`): the load at
    the end joins it when the report is written."""
    fields = cpu_fields()
    flags = set(fields.get("Flags", "").split())
    return {
        "cpu": fields.get("Model name", "?"),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "flags": [flag for flag in FLAGS if flag in flags],
        "load_start": load_average(),
    }


def machine_line(described):
    """One line for a table's heading: `described` is `machine()`'s answer."""
    flags = " ".join(described["flags"]) or "none of " + " ".join(FLAGS)
    load = " ".join(f"{value:.2f}" for value in described["load_start"])
    end = described.get("load_end")
    load += f" -> {' '.join(f'{value:.2f}' for value in end)}" if end else ""
    cores = f"{described['usable_cores']} of {described['cores']}"
    return f"CPU: {described['cpu']}, {cores} cores; flags: {flags}; load average {load}"


def summary(samples, scale=1.0):
    """Median and interquartile range of `samples` times `scale` (1000: seconds to ms)."""
    values = sorted(scale * value for value in samples)
    if len(values) == 1:
        return {"median": values[0], "spread": [values[0], values[0]], "rounds": 1}
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median, "spread": [q1, q3], "rounds": len(values)}


class Stopwatch:
    """Seconds since it was made; in a `with` block, the block's seconds once it has ended."""

    def __init__(self):
        self.started, self.ended = time.perf_counter(), None

    def __enter__(self):
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.ended = time.perf_counter()

    @property
    def seconds(self):
        return (self.ended or time.perf_counter()) - self.started


def timed(call, *args, **kwargs):
    """(`call(*args, **kwargs)`'s answer, its seconds)."""
    with Stopwatch() as watch:
        answer = call(*args, **kwargs)
    return answer, watch.seconds


def interleaved(runs, rounds, inputs=(None,), warmup=1, shuffle_seed=None):
    """{name: [seconds of each call]}: each round calls every run on every input, the runs'
    order rotating by one per call (A B, B A, ...) so each sees the same moments of load,
    or shuffled (seeded) so that no run always follows the same one; `warmup` calls of each
    run on the first input come first, untimed. With the default `inputs`, runs take no
    argument."""
    names, shuffle = list(runs), random.Random(shuffle_seed).shuffle
    call = (lambda run, _: run()) if inputs == (None,) else (lambda run, value: run(value))
    for name in names:
        for _ in range(warmup):
            call(runs[name], inputs[0])
    times = {name: [] for name in names}
    turn = 0
    for _ in range(rounds):
        for value in inputs:
            order = names[turn % len(names) :] + names[: turn % len(names)]
            if shuffle_seed is not None:
                shuffle(order)
            for name in order:
                times[name].append(timed(call, runs[name], value)[1])
            turn += 1
    return times


class Report:
    """One run's figures in the one schema; `write` adds the load at the end."""

    def __init__(self, bench, settings):
        self.bench = bench
        self.settings = dict(settings)
        self.machine = machine()
        self.results = []

    def add(self, name, unit, samples, scale=1.0, **details):
        """A figure from its samples (one for a figure measured once); returns its entry."""
        entry = {"name": name, "unit": unit, **summary(samples, scale), **details}
        self.results.append(entry)
        return entry

    def as_dict(self):
        return {"bench": self.bench, "machine": self.machine, "settings": self.settings, "results": self.results}

    def write(self, path):
        self.machine["load_end"] = load_average()
        Path(path).write_text(json.dumps(self.as_dict(), indent=1, default=str) + "\n", encoding="utf-8")


def run_command(command, timeout=None, **options):
    """Runs `command` to its end, or kills it and its processes after `timeout` seconds:
    {"seconds", "peak_mb", "returncode", "stdout", "stderr"}. The peak is GNU time's (the
    command and the processes it waited for): a process forked from this one would count
    this one's memory in its own ru_maxrss, which exec keeps."""
    watch = Stopwatch()
    process = subprocess.Popen(
        ["/usr/bin/time", "-f", PEAK_MARK + "%M", *map(str, command)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, killed whole
        **options,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    seconds = watch.seconds
    lines = stderr.splitlines()
    peaks = [int(line[len(PEAK_MARK) :]) for line in lines if line.startswith(PEAK_MARK)]
    return {
        "seconds": seconds,
        "peak_mb": peaks[-1] / 1024 if peaks else float("nan"),
        "returncode": process.returncode,
        "stdout": stdout,
        "stderr": "\n".join(line for line in lines if not line.startswith(PEAK_MARK)),
    }


def add_json_argument(parser):
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results here in bench/measure.py's schema")


def add_peer_argument(parser):
    """The flag a peer process is started with: the script answers jobs instead of running."""
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)


class Peer:
    """A script run as a peer (`python script --peer`), kept running: `ask` sends it one job
    (a JSON object, one line on its stdin) and returns its answer (a JSON object on one
    stdout line marked by ANSWER, so that what libraries print around it is skipped).
    `python` may be another environment's interpreter; with `cores`, the peer runs on the
    first `cores` CPUs this process may use (every thread it starts shares them)."""

    def __init__(self, python, script, env=None, cores=None):
        self.command = f"{python} {script} --peer"
        allowed = sorted(os.sched_getaffinity(0))[:cores]
        self.stderr = tempfile.TemporaryFile(mode="w+")  # read on failure; a pipe could fill and block the peer
        try:
            self.process = subprocess.Popen(
                [str(python), str(script), "--peer"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                text=True,
                env=env,
                preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, allowed),
            )
        except OSError as error:  # e.g. no such interpreter: a peer that failed, as one that ended
            self.stderr.close()
            raise RuntimeError(f"{self.command} did not start: {error}") from error

    def ask(self, job):
        try:
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it ended: the failure below says how
        for line in self.process.stdout:
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])
        self.stderr.seek(0)
        error = self.stderr.read()[-3000:]
        raise RuntimeError(f"{self.command} failed ({self.process.wait()}) on {job.get('peer')}:\n{error}")

    def close(self):
        try:
            self.process.stdin.close()  # the peer's loop ends
        except BrokenPipeError:
            pass  # it had ended already
        self.process.wait()
        self.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_peer(python, script, job, env=None, cores=None):
    """One job answered by a peer process started for it."""
    with Peer(python, script, env, cores) as peer:
        return peer.ask(job)


def answer_peer(handlers):
    """The peer's side of `Peer`: answers each job line on stdin with `handlers[job["peer"]](job)`
    (a JSON object) until stdin closes."""
    for line in sys.stdin:
        job = json.loads(line)
        print(ANSWER + json.dumps(handlers[job["peer"]](job)), flush=True)


def timed_calls(run, calls):
    """Seconds of each of `calls` calls of `run`."""
    return [timed(run)[1] for _ in range(calls)]


def timing_handlers(build):
    """The handlers of a peer that times one implementation. "build": `build(job)` returns
    `prepare(job)`, which returns a call of no argument for a "time" job's settings (an
    ImportError answers {"error": "not installed (MODULE)"}); "time": the seconds of
    `calls` calls, after `warmup` untimed ones the first time those settings come."""
    prepared = {}

    def build_peer(job):
        try:
            prepared["prepare"] = build(job)
        except ImportError as error:
            return {"error": f"not installed ({error.name})"}
        return {}

    def time_peer(job):
        settings = json.dumps({key: value for key, value in job.items() if key != "calls"}, sort_keys=True)
        if settings not in prepared:
            prepared[settings] = prepared["prepare"](job)
            timed_calls(prepared[settings], job.get("warmup", 2))
        return {"seconds": timed_calls(prepared[settings], job["calls"])}

    return {"build": build_peer, "time": time_peer}


def start_timing_peers(script, jobs, python=sys.executable):
    """{name: Peer} of `script`'s timing peers, each built by its job of `jobs` ({name: job});
    one that answers an error is reported and left out."""
    peers = {}
    for name, job in jobs.items():
        peer = Peer(python, script)
        try:
            error = peer.ask({**job, "peer": "build"}).get("error")
        except RuntimeError as failure:
            error = str(failure).strip().splitlines()[-1]
        if error:
            print(f"  {name}: {error}", flush=True)
            peer.close()
        else:
            peers[name] = peer
    return peers


def interleaved_peers(peers, job, rounds, settle_seconds=0.0):
    """{name: [seconds]}: rounds in which each timing peer in turn (the order rotating by one
    a round) answers a "time" job; `settle_seconds` of idleness before each turn, so that
    threads a runtime leaves spinning do not slow the next peer."""
    names = list(peers)
    times = {name: [] for name in names}
    for turn in range(rounds):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            time.sleep(settle_seconds)
            times[name] += peers[name].ask({**job, "peer": "time"})["seconds"]
    return times


def step_timer(budget_seconds=None):
    """A Keras callback that keeps the wall time at the start of training and at the end of
    every step (`.times`) and each step's own seconds, batch start to end (`.step_seconds`);
    with `budget_seconds`, it stops training once that much time has passed."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times, self.step_seconds, self.step = [], [], None

        def on_train_begin(self, logs=None):
            self.times.append(time.perf_counter())

        def on_train_batch_begin(self, batch, logs=None):
            self.step = Stopwatch()

        def on_train_batch_end(self, batch, logs=None):
            self.step_seconds.append(self.step.seconds)
            self.times.append(time.perf_counter())
            if budget_seconds is not None and self.times[-1] - self.times[0] > budget_seconds:
                self.model.stop_training = True

    return StepTimer()


def tensor_memory():
    """TensorFlow's CPU allocator: the GB its tensors held at most and hold now (after
    training: the weights and optimizer state). Peak RSS minus the peak is the runtime,
    Python and memory the allocator keeps after tensors are freed."""
    import tensorflow as tf

    info = tf.config.experimental.get_memory_info("CPU:0")
    return {"tensor_peak_gb": info["peak"] / 2**30, "tensor_now_gb": info["current"] / 2**30}


def step_figures(timer, skip, **figures):
    """A training setting's answer: the seconds of each step after the first `skip` (which
    trace and warm up), end to end, peak RSS and tensor memory in GB, and `figures`."""
    steps = [b - a for a, b in zip(timer.times[skip:], timer.times[skip + 1 :])]
    return {"step_seconds": steps, "peak_rss_gb": peak_rss_mb() / 1024, **tensor_memory(), **figures}


def stop_above(limit_gb):
    """Ends this process, saying so on stderr, once its resident memory passes `limit_gb`
    (checked every 0.1 s): a run on a shared machine stays within its share."""

    def watch():
        while True:
            resident = resident_mb() / 1024
            if resident > limit_gb:
                print(f"stopped at {resident:.2f} GB, above {limit_gb} GB", file=sys.stderr, flush=True)
                os._exit(3)
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()


def run_setting(script, job):
    """Runs one training setting of `script` in a new Python process, for its own peak
    memory (ru_maxrss is a process's high-water mark): `job` (the settings, as
    `answer_setting` reads them) in, its `step_figures` out, or {"error": the last lines of
    its output} when it fails (a kill for memory included)."""
    try:
        return run_peer(sys.executable, script, {**job, "peer": "setting"})
    except RuntimeError as error:
        return {"error": " | ".join(str(error).strip().splitlines()[-5:])}


def answer_setting(train):
    """The process `run_setting` starts: `train(the job as an argparse.Namespace)` answers."""
    answer_peer({"setting": lambda job: train(argparse.Namespace(**job))})

"""What every bench script shares: interleaved timing rounds, the machine and its load, peer
runs in another Python, and the one result schema `--json PATH` writes.

Standard library only: a peer script imports this module in a side environment that may
have nothing but its own packages.

The schema:

    {"bench": NAME, "machine": {...}, "settings": {...},
     "results": [{"name", "unit", "median", "spread": [q1, q3], "rounds", ...}]}
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def interleaved(runs, rounds, inputs=(None,), warmup=1):
    """{name: [seconds of each call]}: each round calls every run on every input, the runs'
    order rotating by one per call (A B, B A, ...) so each sees the same moments of load;
    `warmup` calls of each run on the first input come first, untimed. With the default
    `inputs`, runs take no argument."""
    names = list(runs)
    call = (lambda run, _: run()) if inputs == (None,) else (lambda run, value: run(value))
    for name in names:
        for _ in range(warmup):
            call(runs[name], inputs[0])
    times = {name: [] for name in names}
    turn = 0
    for _ in range(rounds):
        for value in inputs:
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                started = time.perf_counter()
                call(runs[name], value)
                times[name].append(time.perf_counter() - started)
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


def add_json_argument(parser):
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results here in bench/measure.py's schema")


def add_peer_argument(parser):
    """The flag `run_peer` starts a script with: the script answers one job and exits."""
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)


def run_peer(python, script, job, env=None, timeout=None):
    """Runs `python script --peer` with `job` as JSON on its stdin and returns the JSON
    object its last stdout line holds; `python` may be another environment's interpreter."""
    completed = subprocess.run(
        [str(python), str(script), "--peer"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"{python} {script} --peer failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(lines[-1])


def answer_peer(handlers):
    """The peer's side of `run_peer`: reads the job from stdin, runs `handlers[job["peer"]]`
    on it and prints its answer (a JSON object) as the last line."""
    job = json.load(sys.stdin)
    answer = handlers[job["peer"]](job)
    print(json.dumps(answer), flush=True)

"""bench/measure.py, the harness the bench scripts share: the order of interleaved rounds,
the result schema, and a peer answering a job in another interpreter."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from bench import measure


def test_interleaved_rounds_rotate_after_untimed_warmup():
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in "AB"}
    times = measure.interleaved(runs, rounds=3, warmup=1)
    assert calls == ["A", "B", "A", "B", "B", "A", "A", "B"]
    assert {name: len(seconds) for name, seconds in times.items()} == {"A": 3, "B": 3}


def test_interleaved_calls_each_run_on_each_input():
    calls = []
    runs = {name: (lambda value, name=name: calls.append((name, value))) for name in "AB"}
    measure.interleaved(runs, rounds=1, inputs=[1, 2], warmup=0)
    assert calls == [("A", 1), ("B", 1), ("B", 2), ("A", 2)]


def test_summary_is_median_and_interquartile_range():
    assert measure.summary([0.004, 0.001, 0.003, 0.002, 0.005], scale=1000) == {
        "median": 3.0,
        "spread": [2.0, 4.0],
        "rounds": 5,
    }
    assert measure.summary([2.0]) == {"median": 2.0, "spread": [2.0, 2.0], "rounds": 1}


def test_report_writes_the_schema(tmp_path):
    report = measure.Report("toy", {"batch": 1})
    report.add("fast", "ms", [0.001, 0.002, 0.003], scale=1000, peer="A")
    report.write(tmp_path / "out.json")
    written = json.loads((tmp_path / "out.json").read_text())
    assert list(written) == ["bench", "machine", "settings", "results"]
    assert written["bench"] == "toy" and written["settings"] == {"batch": 1}
    assert {"cpu", "cores", "usable_cores", "flags", "load_start", "load_end"} <= set(written["machine"])
    assert written["results"] == [
        {"name": "fast", "unit": "ms", "median": 2.0, "spread": [1.5, 2.5], "rounds": 3, "peer": "A"}
    ]
    assert measure.machine_line(written["machine"]).startswith("CPU: ")


PEER_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from bench import measure
print("noise before the answers")
calls = []
handlers = {{"double": lambda job: {{"twice": 2 * job["value"]}}}}
handlers.update(measure.timing_handlers(lambda job: lambda settings: lambda: calls.append(settings["size"])))
handlers["calls"] = lambda job: {{"calls": calls}}
measure.answer_peer(handlers)
"""


def peer_script(tmp_path):
    script = tmp_path / "peer.py"
    script.write_text(PEER_SCRIPT.format(root=str(Path(measure.__file__).parents[1])))
    return script


def test_a_peer_answers_its_job_in_another_interpreter(tmp_path):
    assert measure.run_peer(sys.executable, peer_script(tmp_path), {"peer": "double", "value": 21}) == {"twice": 42}
    with pytest.raises(RuntimeError, match="did not start"):
        measure.run_peer(tmp_path / "no-such-python", peer_script(tmp_path), {"peer": "double", "value": 1})


def test_a_kept_peer_answers_job_after_job_and_its_failure_is_raised(tmp_path):
    with measure.Peer(sys.executable, peer_script(tmp_path)) as peer:
        assert [peer.ask({"peer": "double", "value": value})["twice"] for value in (1, 2)] == [2, 4]
        with pytest.raises(RuntimeError, match="KeyError"):
            peer.ask({"peer": "no such handler"})


def test_timing_peers_take_turns_and_warm_up_once_per_setting(tmp_path):
    script = peer_script(tmp_path)
    peers = measure.start_timing_peers(script, {"A": {}, "B": {}})
    times = measure.interleaved_peers(peers, {"size": 1, "calls": 2, "warmup": 1}, rounds=2)
    times_other = measure.interleaved_peers(peers, {"size": 2, "calls": 1, "warmup": 0}, rounds=1)
    calls = [peer.ask({"peer": "calls"})["calls"] for peer in peers.values()]
    for peer in peers.values():
        peer.close()
    assert {name: len(seconds) for name, seconds in times.items()} == {"A": 4, "B": 4}
    assert {name: len(seconds) for name, seconds in times_other.items()} == {"A": 1, "B": 1}
    assert calls == [[1, 1, 1, 1, 1, 2]] * 2


def test_a_command_runs_to_its_end_or_its_timeout_with_its_peak_memory():
    answered = measure.run_command([sys.executable, "-c", "print('out'); x = bytearray(50 << 20)"])
    assert answered["returncode"] == 0 and answered["stdout"] == "out\n" and answered["stderr"] == ""
    assert 50 < answered["peak_mb"] < 500
    killed = measure.run_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert killed["returncode"] != 0 and killed["seconds"] < 20


def test_shuffled_rounds_call_every_run_once_a_round():
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in "ABCD"}
    measure.interleaved(runs, rounds=5, warmup=0, shuffle_seed=0)
    rounds = [calls[start : start + 4] for start in range(0, 20, 4)]
    assert all(sorted(order) == list("ABCD") for order in rounds)
    assert len({tuple(order) for order in rounds}) > 1


def test_timed_answers_the_call_and_its_seconds_on_the_wall_clock():
    answer, seconds = measure.timed(lambda delay: time.sleep(delay) or "done", 0.05)
    assert answer == "done" and 0.05 <= seconds < 5
    with measure.Stopwatch() as watch:
        time.sleep(0.02)
    ended = watch.seconds
    time.sleep(0.02)
    assert 0.02 <= ended == watch.seconds < 5  # frozen when the block ended


def test_step_timer_times_every_step_of_fit_and_stops_at_its_budget():
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32")
    timer = measure.step_timer()
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[timer])
    assert len(timer.times) == 5 and timer.times == sorted(timer.times) and len(timer.step_seconds) == 4
    figures = measure.step_figures(timer, 1, windows=3)
    assert len(figures["step_seconds"]) == 3 and figures["peak_rss_gb"] > 0 and figures["windows"] == 3
    budget = measure.step_timer(budget_seconds=0)
    model.fit(x, y, batch_size=2, epochs=5, verbose=0, callbacks=[budget])
    assert len(budget.step_seconds) == 1  # past its budget after the first step: fit stopped there


def test_resident_memory_is_the_kernels_and_its_peak_not_below_it():
    statm_mb = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    assert abs(measure.resident_mb() - statm_mb) < 0.1 * statm_mb
    assert measure.resident_mb(field="VmHWM") >= measure.resident_mb() > 0
    assert measure.peak_rss_mb() >= measure.resident_mb(field="VmHWM") * 0.9

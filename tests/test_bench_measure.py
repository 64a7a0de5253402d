"""bench/measure.py, the harness the bench scripts share: the order of interleaved rounds,
the result schema, and a peer answering a job in another interpreter."""

import json
import sys
import textwrap

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


def test_a_peer_answers_its_job_in_another_interpreter(tmp_path):
    script = tmp_path / "peer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(measure.Path(measure.__file__).parents[1])!r})
            from bench import measure
            print("noise before the answer")
            measure.answer_peer({{"double": lambda job: {{"twice": 2 * job["value"]}}}})
            """
        )
    )
    assert measure.run_peer(sys.executable, script, {"peer": "double", "value": 21}) == {"twice": 42}

"""`--cpu-durations FILE` (tests/conftest.py), which decides the slow marks, counts CPU and not sleep."""

import json
from pathlib import Path

pytest_plugins = ["pytester"]


def test_a_test_s_cpu_seconds_leave_out_its_sleep(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(
        test_timed="""
import time

def test_busy():
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass

def test_asleep():
    time.sleep(0.4)
"""
    )
    out = pytester.path / "cpu.jsonl"
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", f"--cpu-durations={out}")
    result.assert_outcomes(passed=2)
    rows = {name.split("::")[-1]: (cpu, wall) for cpu, wall, name in map(json.loads, out.read_text().splitlines())}
    assert rows["test_busy"][0] >= 0.35 and rows["test_busy"][1] >= 0.35
    assert rows["test_asleep"][0] < 0.1 and rows["test_asleep"][1] >= 0.35

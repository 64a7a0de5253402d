"""`finetune ... --learning-rate A,B --restarts N`: the search as its users run it, workers in
processes of their own sharing one Optuna study (each trial exactly once, the best kept, a
killed worker's trial resumed by the next), and its bad input as one error line."""

import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
from conftest import DATA, require

from bert_keras import BertConfig, BertEncoder
from bert_keras.recipes import search_report
from bert_keras_cli.cli import main as cli
from bert_keras_cli.finetune.search import PRESETS

# 12 training pairs in batches of 4: 3 steps an epoch.
COMMON = ["--verbose", "0", "--eval-batch-size", "12", "--batch-size", "4"]


def embedder_command(folder):
    """`finetune embedder` on 12 SST-2 sentence pairs (dev: the same pairs, ranked by nDCG@10,
    a metric of many values) from a one-layer tiny encoder whose vocabulary is the pairs' words
    (small files: trials, backups and the best model are written fast)."""
    rows = [row.split("\t")[0] for row in require(DATA / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:25]]
    pairs = folder / "pairs.tsv"
    pairs.write_text("anchor\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b in zip(rows[::2], rows[1::2])))
    words = sorted({word for row in rows for word in re.findall(r"\w+|[^\w\s]", row.lower())})
    vocab, encoder = folder / "vocab.txt", folder / "encoder.keras"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    if not encoder.exists():
        BertEncoder(BertConfig.preset("tiny", vocab_size=len(words) + 5, num_hidden_layers=1)).save(encoder)
    data = ["--train", str(pairs), "--dev", str(pairs), "--init", str(encoder), "--vocab", str(vocab)]
    return ["finetune", "embedder", *data, *COMMON]


def records(output):
    return [json.loads(line) for line in (output / "search.jsonl").read_text().splitlines()]


def worker(argv):
    """The command in a process of its own, as a second machine would run it."""
    return subprocess.Popen(
        [sys.executable, "-m", "bert_keras_cli.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_dry_run_lists_the_papers_grids_and_bad_grids_are_one_line_errors(tmp_path, capsys):
    base = [*embedder_command(tmp_path)[:-6], "--output-dir", str(tmp_path / "search")]  # no --batch-size
    assert cli([*base, "--search", "devlin", "--restarts", "2", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = {
        f"lr{rate}_bs{batch}_ep{epochs}_seed{seed}"
        for batch, rate, epochs, seed in itertools.product((16, 32), ("5e-05", "3e-05", "2e-05"), (2, 3, 4), (0, 1))
    }
    assert {line.split()[0] for line in lines[:-1]} == expected and lines[-1] == "36 trials"
    assert "lr5e-05_bs16_ep2_seed0 --learning-rate 5e-05 --batch-size 16 --epochs 2 --seed 0" in lines
    assert cli([*base, "--search", "devlin-glue", "--dry-run"]) == 0
    names = capsys.readouterr().out.splitlines()[:-1]
    rates = ("5e-05", "4e-05", "3e-05", "2e-05")
    assert [name.split()[0] for name in names] == [f"lr{rate}_bs32_ep3" for rate in rates]
    assert cli([*base, "--bias-correction", "false,true", "--reinit-layers", "0,2", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "4 trials" and "bcTrue_reinit2 --bias-correction True --reinit-layers 2" in lines
    assert not (tmp_path / "search").exists()
    assert set(PRESETS) == set(search_report.PRESETS)  # the flag choices, named without TensorFlow

    for flags, message in [
        (["--search", "devlin", "--learning-rate", "1e-5,2e-5"], "--search devlin sets --learning-rate: give one"),
        (["--learning-rate", "1e-5,2e-5", "--restarts", "0"], "restarts must be at least 1, got 0"),
        (["--seed", "1,2", "--restarts", "2"], "seeds given both as a list and as restarts"),
        (["--learning-rate", "1e-5,2e-5", "--discard-after", "1.5"], "--discard-after must be a fraction"),
        (
            ["--learning-rate", "1e-5,2e-5", "--discard-after", "0.3", "--discard-keep", "1"],
            "--discard-keep must be a share between 0 and 1, got 1.0",
        ),
        (
            ["--learning-rate", "1e-5,2e-5", "--discard-after", "0.3", "--discard-keep", "0"],
            "--discard-keep must be a share between 0 and 1, got 0.0",
        ),
        (["--learning-rate", "1e-5,2e-5", "--discard-keep", "0.3"], "give --discard-after too"),
        (["--discard-keep", "0.3"], "--discard-keep is for a search"),
        (["--keep-models"], "--keep-models is for a search"),
        (["--learning-rate", "1e-5,2e-5", "--overwrite"], "--overwrite does not start a search over"),
        (["--learning-rate", "1e-5,2e-5", "--study", "sqlite:////no/such/folder/x.db"], "cannot open it"),
    ]:
        assert cli([*base, *flags]) == 2, flags
        error = capsys.readouterr().err.strip()
        assert "\n" not in error and message in error, (flags, error)
        assert error.startswith("bert-keras finetune: error: ")
    for flags, message in [
        (["--learning-rate", "5e-5,,3e-5"], "empty value"),
        (["--batch-size", "16,x"], "int"),
        (["--learning-rate", "1e-5,2e-5", "--discard-after", "0.3", "--discard-keep", "half"], "invalid float value"),
        (["--reinit-layers", "0,-1"], "expected a number of layers (0 or more)"),
    ]:
        with pytest.raises(SystemExit):
            cli([*base, *flags, "--dry-run"])
        assert message in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.slow
def test_two_workers_run_every_trial_once_and_keep_the_best(tmp_path, capsys):
    """Two processes started together on one folder: four trials (two of batch 0, which
    fail) each run once, by either; best.keras is the trial of the best nDCG@10; the same
    command again only reports; another grid in that folder is refused, naming what differs.
    --grace-period 20: a worker waiting on the other's trial looks again every 5 s, not 75."""
    output = tmp_path / "search"
    argv = [*embedder_command(tmp_path), "--output-dir", str(output), "--epochs", "1", "--grace-period", "20"]
    grid = ["--learning-rate", "1e-3,1e-4", "--batch-size", "4,0"]
    workers = [worker([*argv, *grid]) for _ in range(2)]
    outputs = [process.communicate(timeout=600)[0] for process in workers]
    assert [process.returncode for process in workers] == [0, 0], outputs

    found = records(output)
    names = [record["trial"] for record in found]
    assert sorted(names) == sorted(["lr0.001_bs4", "lr0.001_bs0", "lr0.0001_bs4", "lr0.0001_bs0"])
    started = [re.match(r"trial (\S+): ", line) for text in outputs for line in text.splitlines()]
    assert sorted(match[1] for match in started if match) == sorted(names)  # each trial started once
    for record in found:
        assert record["status"] == ("failed" if record["params"]["batch_size"] == 0 else "complete"), record
        assert record["worker"].split(":")[1] in {str(process.pid) for process in workers}
    complete = [record for record in found if record["status"] == "complete"]
    assert all(record["error"] for record in found if record["status"] == "failed")
    for record in complete:
        assert record["main_metric"] == "ndcg@10" and record["steps"] == 3 and len(record["epochs"]) == 1
        assert record["value"] == record["epochs"][0]["ndcg@10"]
    best = max(complete, key=lambda record: record["value"])
    kept = [path.parent.name for path in (output / "trials").glob("*/best.keras")]
    assert kept == [best["trial"]]
    for got, want in zip(
        keras.saving.load_model(output / "best.keras").get_weights(),
        keras.saving.load_model(output / "trials" / best["trial"] / "best.keras").get_weights(),
    ):
        np.testing.assert_array_equal(got, want)
    assert (output / "search.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for text in outputs:
        assert f"best: {best['trial']} (ndcg@10 {best['value']:.4f})" in text
        assert "2 complete, 2 failed, 0 discarded" in text

    assert cli([*argv, *grid]) == 0
    again = capsys.readouterr().out
    assert not re.search(r"^trial \S+: ", again, re.M) and f"best: {best['trial']}" in again
    assert records(output) == found
    assert cli([*argv, "--learning-rate", "1e-3,1e-5", "--batch-size", "4,0"]) == 2
    error = capsys.readouterr().err
    assert "holds a search of another grid or command" in error
    assert "trials lr0.0001_bs4, lr0.0001_bs0 there and not now, lr1e-05_bs4, lr1e-05_bs0 now" in error


@pytest.mark.slow
def test_a_killed_workers_trial_is_resumed_by_the_next(tmp_path, capsys):
    """A worker SIGKILLed inside its first trial, after a backup; the command started again
    (--grace-period 1: the dead worker's trial is taken over at once) resumes that trial from
    its backups and runs the other: each trial once, both complete."""
    output = tmp_path / "search"
    argv = [*embedder_command(tmp_path), "--output-dir", str(output), "--epochs", "2", "--backup-steps", "1"]
    argv += ["--learning-rate", "1e-3,1e-4"]
    process = worker(argv)
    backups = output / "trials" / "lr0.001" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (backups / "state.json").exists():  # a whole backup
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.1)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    time.sleep(1.5)
    assert cli([*argv, "--grace-period", "1"]) == 0
    out = capsys.readouterr().out
    assert "trial lr0.001: " in out and "resuming after step" in out
    found = records(output)
    assert sorted((record["trial"], record["status"]) for record in found) == [
        ("lr0.0001", "complete"),
        ("lr0.001", "complete"),
    ]


@pytest.mark.slow
def test_discard_after_stops_trials_below_the_median_of_the_trials_there(tmp_path, capsys):
    """--discard-after 0.5 on three trials run one after the other: the first two (too few
    peers) run to the end; the third, whose nDCG@10 halfway is below the median of the three
    there (it learns at a tenth of their rate; the embedder's evaluation has no dev loss), is
    stopped, recorded as discarded, its folder gone. The folder refuses another --discard-keep."""
    output = tmp_path / "search"
    argv = [*embedder_command(tmp_path), "--output-dir", str(output), "--epochs", "2", "--discard-after", "0.5"]
    assert cli([*argv, "--learning-rate", "3e-4,1e-4,1e-5"]) == 0
    found = records(output)
    assert len(found) == 3
    interim = []
    for record in found:
        value = record["interim"]["ndcg@10"]
        assert record["interim"]["step"] == 3 and "loss" not in record["interim"]
        interim.append(value)
        discarded = len(interim) > 2 and value < statistics.median(interim)
        assert record["status"] == ("discarded" if discarded else "complete"), (record, interim)
        assert (output / "trials" / record["trial"]).exists() == (not discarded)
    assert [record["status"] for record in found] == ["complete", "complete", "discarded"]
    out = capsys.readouterr().out
    assert f"discarded at step 3: ndcg@10 {interim[2]:.4f} ranks 3 of 3: below the best 50%" in out

    assert cli([*argv, "--learning-rate", "3e-4,1e-4,1e-5", "--discard-keep", "0.3"]) == 2
    assert "--discard-keep 0.5 there, 0.3 now" in capsys.readouterr().err

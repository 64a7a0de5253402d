"""The `bert-keras` command as a user meets it: fast help, no start-up noise (unless asked
for), one-line errors and interrupts, fine-tuning runs that never overwrite silently and
leave a light model."""

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import h5py
import keras
import pytest
from conftest import DATA, require
from trained_models import copy_of

from bert_keras_cli.cli import main as cli
from bert_keras_cli.startup import START_UP_LINES

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def user_env():
    """The environment of a user's shell: no test-suite TensorFlow settings."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    return {**env, "PYTHONPATH": str(ROOT)}


def test_parsing_imports_no_tensorflow():
    code = (
        "import sys; from bert_keras_cli.cli import build_parser; p = build_parser(); "
        "p.parse_args(['finetune', 'glue', '--task', 'sst-2', '--data-dir', 'd', '--output-dir', 'x']); "
        "print(sorted(m for m in ('tensorflow', 'keras', 'bert_keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=user_env(), cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr
    from bert_keras.training.distribute import STRATEGIES
    from bert_keras_cli.arguments import STRATEGIES as PARSED

    assert PARSED == STRATEGIES


def test_a_command_prints_no_tensorflow_start_up_lines(tmp_path):
    out = subprocess.run(
        [
            str(BIN / "bert-keras"),
            "vocab",
            "--corpus",
            str(require(DATA / "pretraining" / "sample_text.txt")),
            "--size",
            "200",
            "--out",
            str(tmp_path / "vocab.txt"),
        ],
        capture_output=True,
        text=True,
        env=user_env(),
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    noise = [line for line in out.stderr.splitlines() if START_UP_LINES.match(line) or "E0000" in line]
    assert not noise, noise
    assert "learning 200 pieces" in out.stderr  # the command's own lines still show


@pytest.mark.slow
@pytest.mark.parametrize("level", [None, "0"])
def test_tensorflow_start_up_lines_show_only_when_asked_for(tmp_path, level):
    """A command that loads TensorFlow (`plot` of a folder without logs: TensorFlow, then
    a one-line error) keeps its C++ start-up lines out; `TF_CPP_MIN_LOG_LEVEL=0` shows them."""
    (tmp_path / "run").mkdir()
    env = user_env() if level is None else {**user_env(), "TF_CPP_MIN_LOG_LEVEL": level}
    out = subprocess.run(
        [str(BIN / "bert-keras"), "plot", "run"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 2, out.stderr
    error = "bert-keras plot: error: no TensorBoard logs (events.out.tfevents.*) under run"
    assert out.stderr.splitlines()[-1] == error
    start_up = [line for line in out.stderr.splitlines() if START_UP_LINES.match(line)]
    if level is None:
        assert out.stderr == error + "\n"
    else:
        assert start_up, out.stderr


@pytest.mark.slow
def test_the_smoke_script_prints_no_tensorflow_start_up_lines():
    """serving/smoke.py is a program too: its start-up is as quiet as the commands'."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "serving" / "smoke.py"), "--help"],
        capture_output=True,
        text=True,
        env=user_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.startswith("usage: smoke.py"), out.stderr
    assert out.stderr == "", out.stderr


@pytest.mark.slow
def test_ctrl_c_is_one_line_with_the_resume_hint(tmp_path):
    command = [
        str(BIN / "bert-keras"),
        "pretrain",
        "--config",
        "tiny",
        "--vocab",
        str(require(DATA / "vocab" / "vocab.txt")),
        "--corpus",
        str(require(DATA / "pretraining" / "sample_text.txt")),
        "--output",
        str(tmp_path / "run"),
        "--batch-size",
        "4",
        "--steps",
        "100000",
        "--checkpoint-every",
        "1000",
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=user_env(), cwd=tmp_path
    )
    deadline = time.time() + 120
    while not (tmp_path / "run" / "logs").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(1)
    process.send_signal(signal.SIGINT)
    # Python runs the handler once TensorFlow's current C++ call returns: with the full suite's
    # workers beside it on 2 cores, a run once took over 60 s to stop.
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert err.rstrip().splitlines()[-1] == (
        "bert-keras pretrain: interrupted; run the same command again to resume from the last checkpoint"
    )


@pytest.mark.slow
def test_finetune_refuses_a_run_folder_unless_overwrite(finetuned, tmp_path, capsys):
    out = copy_of(finetuned("tsv"), tmp_path)
    command = finetuned.command("tsv", out)
    # The model alone: no optimizer state, no second weights file.
    assert sorted(p.name for p in out.iterdir()) == [
        "best.keras",
        "best_metrics.json",
        "dev_predictions.tsv",
        "eval_results.json",
        "evaluations",
        "labels.txt",
        "logs",
        "run.json",
    ]
    with zipfile.ZipFile(out / "best.keras") as archive:
        archive.extract("model.weights.h5", tmp_path)
    with h5py.File(tmp_path / "model.weights.h5") as weights:
        assert "optimizer" not in weights and "layers" in weights
    assert getattr(keras.saving.load_model(out / "best.keras"), "optimizer", None) is None
    stamp = (out / "best.keras").stat().st_mtime_ns
    capsys.readouterr()

    assert cli(command) == 2
    err = capsys.readouterr().err
    assert (
        f"--output-dir {out} is not empty (best.keras, best_metrics.json, dev_predictions.tsv, eval_results.json, ...)"
        in err
    )
    assert (out / "best.keras").stat().st_mtime_ns == stamp  # untouched

    (out / "MRPC.tsv").write_text("an old submission\n")
    old_logs = sorted((out / "logs").rglob("events.out.tfevents.*"))
    assert cli([*command, "--overwrite"]) == 0
    assert not (out / "MRPC.tsv").exists()  # nothing of the old run stays beside the new model
    assert not set(old_logs) & set((out / "logs").rglob("events.out.tfevents.*"))

    (out / "notes.md").write_text("mine\n")
    assert cli([*command, "--overwrite"]) == 2
    assert "holds files no fine-tuning run writes (notes.md)" in capsys.readouterr().err
    assert (out / "notes.md").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["vocab", "--corpus", "missing.txt", "--size", "100", "--out", "v.txt"], "corpus not found: missing.txt"),
        (["finetune", "tsv", "--train", "t.tsv", "--dev", "t.tsv", "--output-dir", "o"], "train not found: t.tsv"),
        (["export", "model.keras", "--out", "o"], "model not found: model.keras"),
        (["plot", "no_run"], "no run folder no_run"),
    ],
)
def test_a_missing_input_is_reported_before_tensorflow_loads(tmp_path, argv, message):
    code = (
        "import sys; from bert_keras_cli.cli import main; code = main(sys.argv[1:]); "
        "print(code, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=user_env(), cwd=tmp_path, timeout=60
    )
    assert out.stdout.split() == ["2", "False"], out.stderr
    assert out.stderr.strip() == f"bert-keras {argv[0]}: error: {message}"


def test_checkpoint_prefixes_and_remote_paths_are_left_to_the_command(tmp_path):
    from bert_keras_cli.arguments import CheckpointPath, InputPath

    (tmp_path / "model.ckpt.index").write_text("")
    assert not CheckpointPath(str(tmp_path / "model.ckpt")).missing()  # a TF1 checkpoint prefix
    assert not CheckpointPath("auto").missing()
    assert CheckpointPath(str(tmp_path / "other.ckpt")).missing()
    assert not InputPath("gs://bucket/data.txt").missing() and not InputPath(str(tmp_path / "*.txt")).missing()


@pytest.mark.parametrize(
    "argv",
    [
        ["vocab", "--corpus", "c.txt", "--size", "100", "--out", "v.txt"],
        ["create-pretraining-data", "--input", "c.txt", "--vocab", "v.txt", "--output", "o"],
        ["predict", "best.keras", "--input", "c.txt", "--output", "o.jsonl"],
    ],
)
def test_every_beam_command_reads_the_runner_and_its_pipeline_options_alike(argv):
    from apache_beam.options.pipeline_options import PipelineOptions

    from bert_keras_cli.arguments import beam_options
    from bert_keras_cli.cli import build_parser

    parser = build_parser()
    assert beam_options(parser.parse_args(argv)) is None
    flags = ["--runner", "DataflowRunner", "--project=p", "--region", "r", "--temp_location=gs://b/tmp"]
    forms = [flags] if argv[0] == "predict" else [flags, [*flags[:2], "--", *flags[2:]]]  # and after --
    for form in forms:
        options = PipelineOptions(beam_options(parser.parse_args([*argv, *form]))).get_all_options()
        assert (options["runner"], options["project"], options["region"]) == ("DataflowRunner", "p", "r")
        assert options["temp_location"] == "gs://b/tmp"
    with pytest.raises(ValueError, match="need --runner"):
        beam_options(parser.parse_args([*argv, "--runner", "local", "--project=p"]))


@pytest.mark.parametrize("spelling", [["--feature-based", "-1,-2,-3,-4"], ["--feature-based=-1,-2,-3,-4"]])
def test_feature_based_layers_may_follow_the_flag_after_a_space(spelling):
    from bert_keras_cli.cli import build_parser

    command = ["finetune", "conll", "--data-dir", "d", "--output-dir", "o"]
    assert build_parser().parse_args([*command, *spelling]).feature_based == ["-1", "-2", "-3", "-4"]
    mixed = build_parser().parse_args([*command, "--feature-based", "-2,embeddings", "--combine", "sum"])
    assert (mixed.feature_based, mixed.combine) == (["-2", "embeddings"], "sum")
    features = build_parser().parse_args(["extract-features", "--input", "i", "--output", "o", "--layers", "-1,-2"])
    assert features.layers == "-1,-2"

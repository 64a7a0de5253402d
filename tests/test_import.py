"""`import bert_keras` has no side effects beyond its purpose: in a fresh interpreter, after
TensorFlow's, tf.text's and Keras' own imports, it sets, changes and removes no environment
variable, leaves file descriptor 2 where it was, patches nothing, and adds to Keras' registry
only its own classes, all of them (what `.keras` loading needs)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts a Python that imports TensorFlow

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, os
import keras, tensorflow, tensorflow_text

def classes():
    return {name: f"{cls.__module__}.{cls.__qualname__}" for name, cls in keras.saving.get_custom_objects().items()}

environ, stderr, registry = dict(os.environ), os.fstat(2), classes()
import bert_keras
from bert_keras import compat

changed = [key for key in set(environ) | set(os.environ) if environ.get(key) != os.environ.get(key)]
report = {
    "environment": sorted(changed),
    "stderr": (os.fstat(2).st_dev, os.fstat(2).st_ino) == (stderr.st_dev, stderr.st_ino),
    "patched": compat.keras_20585_patched(),
    "added": {name: path for name, path in classes().items() if name not in registry},
    "exported": [f"{obj.__module__}.{obj.__qualname__}" for obj in map(vars(bert_keras).get, bert_keras.__all__)],
}
import importlib, pkgutil
for tier in ("layers", "text", "models", "training", "tasks"):
    package = importlib.import_module(f"bert_keras.{tier}")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
report["unregistered"] = sorted(name for name in classes() if name not in registry and name not in report["added"])
print(json.dumps(report))
"""


def user_env():
    """A user's shell: none of the test suite's TensorFlow or Keras settings."""
    env = {key: value for key, value in os.environ.items() if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    return {**env, "PYTHONPATH": str(ROOT)}


def test_import_changes_no_environment_and_registers_only_its_own_classes():
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["environment"] == [], report["environment"]
    assert report["stderr"] and not report["patched"]
    added = report["added"]
    for name, path in added.items():
        package, _, class_name = name.partition(">")
        assert package == "bert_keras" and path.startswith("bert_keras.") and path.endswith(f".{class_name}"), (
            name,
            path,
        )
        assert not class_name.startswith("_"), f"{name} ({path}) is not one of the library's classes"
    # Every exported layer, model, head, loss and optimizer class is there (the base BertTask
    # and the BertConfig dataclass are not Keras objects).
    exported = {path for path in report["exported"] if path.rsplit(".", 1)[-1][0].isupper()}
    assert exported - {"bert_keras.tasks.task.BertTask", "bert_keras.config.BertConfig"} <= set(added.values())
    # A `.keras` file of any of the library's models loads after `import bert_keras` alone:
    # no class of theirs waits for a module the package does not import.
    assert report["unregistered"] == []


def changed_environment(imports):
    """The environment variables a fresh interpreter's `import {imports}` sets, changes or removes."""
    code = (
        "import json, os; before = dict(os.environ)\n"
        f"import {imports}\n"
        "print(json.dumps(sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_import_first_sets_only_what_tensorflow_and_keras_set():
    """Imported first (TensorFlow loads inside it), `import bert_keras` sets exactly the
    variables `import tensorflow, tensorflow_text, keras` sets (TF2_BEHAVIOR and the like):
    no TF_CPP_MIN_LOG_LEVEL, no KERAS_BACKEND."""
    assert changed_environment("bert_keras") == changed_environment("tensorflow, tensorflow_text, keras")


def test_another_keras_backend_is_a_clear_error():
    """bert_keras sets no KERAS_BACKEND of its own: under another backend (as a user's
    ~/.keras/keras.json may choose; jax is not installed here, so Keras is told it is set)
    the import says so."""
    code = "import keras; keras.backend.backend = lambda: 'jax'; import bert_keras"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1
    assert "ImportError: bert_keras runs on Keras' TensorFlow backend" in result.stderr, result.stderr[-2000:]
    assert "set to 'jax' (KERAS_BACKEND or ~/.keras/keras.json): set KERAS_BACKEND=tensorflow" in result.stderr

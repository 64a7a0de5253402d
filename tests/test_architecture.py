"""The package's tiers, checked from the code: the import-linter contracts in
pyproject.toml pass, every module belongs to a tier, no modules import each other
in a circle, and modules and functions stay short."""

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
from private_uses import private_uses

ROOT = Path(__file__).resolve().parents[1]


def contracts():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_contracts_pass():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken" in result.stdout, result.stdout


def test_every_module_belongs_to_a_tier():
    """A new top-level module outside the tiers would escape the layers contract."""
    (layers,) = [contract["layers"] for contract in contracts() if contract["type"] == "layers"]
    tiers = {name.strip() for layer in layers for name in layer.split("|")}
    top_level = {f"bert_keras.{path.stem}" for path in (ROOT / "bert_keras").glob("*.py") if path.stem != "__init__"}
    top_level |= {
        f"bert_keras.{path.name}" for path in (ROOT / "bert_keras").iterdir() if (path / "__init__.py").exists()
    }
    assert top_level <= tiers, f"modules in no tier: {sorted(top_level - tiers)}"


def test_no_import_cycles():
    graph = grimp.build_graph("bert_keras", "bert_keras_cli")
    modules = sorted(graph.modules)
    cycles = []
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if (
                imported != module
                and not module.startswith(imported + ".")
                and graph.find_shortest_chain(importer=imported, imported=module)
            ):
                cycles.append((module, imported))
    # A package's __init__ importing its own submodules is not a cycle of the code's logic.
    cycles = [(a, b) for a, b in cycles if not (a.startswith(b + ".") or b.startswith(a + "."))]
    assert not cycles, f"import cycles: {cycles}"


def test_ruff_lint_and_format_are_clean():
    """The rules and line length are pyproject.toml's `[tool.ruff]`."""
    ruff = Path(sys.executable).with_name("ruff")
    for command in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = subprocess.run([str(ruff), *command], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout}{result.stderr}"


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 80


def test_library_modules_and_functions_are_short():
    """One role a file and a function a reader takes in at once: no module of bert_keras over
    400 lines, no function over 80."""
    long_modules, long_functions = [], []
    for path in sorted((ROOT / "bert_keras").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES:
            long_modules.append(f"{name} ({lines} lines)")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}:{node.name} ({length} lines)")
    assert not long_modules + long_functions, (
        f"modules of bert_keras over {MAX_MODULE_LINES} lines: {long_modules}; "
        f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
    )


def pipeline_functions():
    for path in sorted((ROOT / "pipelines").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield str(path.relative_to(ROOT / "pipelines")), node


def test_pipelines_only_parse_print_and_call_the_library():
    """The commands hold no recipe of their own: no function over 60 lines, and no
    `compile`/`fit` (the runs are `bert_keras.recipes`, which Keras scripts call too)."""
    long = [
        f"{name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, node in pipeline_functions()
        if node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long, f"functions in pipelines/ over 60 lines: {long}"
    calls = [
        f"{name}:{call.lineno} .{call.func.attr}()"
        for name, node in pipeline_functions()
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("compile", "fit")
    ]
    assert not calls, f"pipelines/ compiles or fits models itself: {calls}"


# Private Keras / TensorFlow / tf.text symbols, by name, in every folder (bert_keras/ and pipelines/ are
# also read as code, below): they belong in bert_keras/compat.py, whose
# self-check (tests/compat_check.py) verifies each still takes effect (docs/development.md).
# Tests and benchmarks may run the original tools they compare against: TensorFlow's
# saved_model_cli, tf.text's learner.
PRIVATE = re.compile(
    r"keras\.src\b|tensorflow\.python\b|_pywrap|tf\.__internal__|tensorflow_text\.tools"
    r"|\._(?:convert_input_args|allow_non_tensor_positional_args|clip_gradients|all_reduce_sum_gradients"
    r"|log_epoch_metrics|get_variable_index|iterations|maybe_symbolic_build|as_serialized_graph|learning_rate"
    r"|distribute_strategy|collective_all_reduce_multi_worker)\b|def compile_from_config"
)
REFERENCE_TOOLS = re.compile(
    r"tensorflow\.python\.tools import saved_model_cli|tensorflow_text\.tools\.wordpiece_vocab import"
)


def test_private_hooks_live_in_compat():
    allowed = {
        ROOT / "bert_keras" / "compat.py",
        ROOT / "tests" / "compat_check.py",
        ROOT / "tests" / "test_compat.py",
        ROOT / "tests" / "private_uses.py",
        Path(__file__).resolve(),
    }
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("bert_keras", "pipelines", "serving", "bench", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line) and not (folder in ("tests", "bench") and REFERENCE_TOOLS.search(line))
    ]
    assert not found, "private Keras/TensorFlow symbols outside bert_keras/compat.py:\n" + "\n".join(found)


def test_the_library_imports_checkpoint_names_from_their_modules():
    """`bert_keras.checkpoint` exports only what users call (docs/checkpoints.md); the
    library and the commands import from the submodules, so a name can stay internal."""
    package = ROOT / "bert_keras" / "checkpoint" / "__init__.py"
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for folder in ("bert_keras", "pipelines")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != package
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "bert_keras.checkpoint"
    ]
    assert not found, f"imports from the package, not its modules: {found}"


@pytest.mark.slow
def test_no_private_keras_or_tensorflow_outside_compat():
    """Every module of bert_keras and pipelines but compat.py, read as code (tests/private_uses.py):
    no private module import, no private attribute of Keras, TensorFlow or tf.text modules, and
    no private attribute that Keras or TensorFlow classes define, on `self` or another object."""
    compat = ROOT / "bert_keras" / "compat.py"
    found = [
        use
        for folder in ("bert_keras", "pipelines")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != compat
        for use in private_uses(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]
    assert not found, "private Keras/TensorFlow symbols outside bert_keras/compat.py:\n" + "\n".join(found)
    assert len(private_uses(compat.read_text(encoding="utf-8"))) > 20  # the check sees compat's own hooks


PRIVATE_USES = """
import keras
import tensorflow as tf
from keras import callbacks
from keras.src.backend.tensorflow import trainer
import tensorflow.python.ops


class Backup(keras.callbacks.BackupAndRestore):
    def on_epoch_end(self, epoch, logs=None):
        self._current_epoch = epoch + 1
        self._save_model()


class Base(callbacks.TensorBoard):
    pass


class Logs(Base):
    def _log_epoch_metrics(self, epoch, logs):
        super()._log_epoch_metrics(epoch, logs)


class Clipping:
    def _clip_gradients(self, grads):
        return super()._clip_gradients(grads)


def strategy_of(model):
    tf.__internal__.tracking.AutoTrackable()
    keras.ops._private_helper()
    return getattr(model, "_distribute_strategy", None) or model._compile_loss
"""


def test_the_private_use_check_flags_each_kind_of_use():
    found = private_uses(PRIVATE_USES, "snippet.py")
    assert found == [
        "snippet.py:5: from keras.src.backend.tensorflow import trainer",
        "snippet.py:6: import tensorflow.python.ops",
        "snippet.py:11: self._current_epoch (private in a Keras/TensorFlow class)",
        "snippet.py:12: self._save_model (private in a Keras/TensorFlow class)",
        "snippet.py:20: overrides the private _log_epoch_metrics of a Keras/TensorFlow class",
        "snippet.py:21: super()._log_epoch_metrics (private in a Keras/TensorFlow class)",
        "snippet.py:25: overrides the private _clip_gradients of a Keras/TensorFlow class",
        "snippet.py:26: super()._clip_gradients (private in a Keras/TensorFlow class)",
        "snippet.py:30: tf.__internal__ (private in tensorflow)",
        "snippet.py:31: keras.ops._private_helper (private in keras)",
        "snippet.py:32: model._distribute_strategy (private in Keras/TensorFlow classes)",
        "snippet.py:32: model._compile_loss (private in Keras/TensorFlow classes)",
    ], found


def test_the_private_use_check_leaves_a_modules_own_private_names():
    own = """
import keras
from bert_keras.training.backup import StepBackup


class Progress(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self._started = None

    def _elapsed(self):
        return self._started


class Resumes(StepBackup):
    def _save(self, epoch_end):
        return super()._save(epoch_end) or _helper(self._latest_is_whole)


def _helper(backup):
    return backup._own_state, keras.ops.sum, backup.__class__
"""
    assert private_uses(own) == []


def test_every_package_folder_installs():
    """pyproject.toml lists the packages by hand (pipelines/ installs as `bert_keras_cli`):
    a package folder missing from the list would be left out of a wheel."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(path.parent.relative_to(ROOT).parts).replace("pipelines", "bert_keras_cli", 1)
        for top in ("bert_keras", "pipelines")
        for path in (ROOT / top).rglob("__init__.py")
    }
    assert listed == folders


def test_commands_install_as_bert_keras_cli(tmp_path):
    """Outside the checkout the commands are `bert_keras_cli`; no top-level `pipelines`
    module is installed to clash with another project's."""
    code = "import bert_keras_cli.cli\ntry:\n    import pipelines\nexcept ImportError:\n    print('no pipelines')"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no pipelines"


def module_names():
    """Each module as docs/architecture.md names it: its path under bert_keras/ (`tasks/task.py`,
    `compat.py`) or under pipelines/ (`finetune/glue.py`); package `__init__.py` files aside."""
    return {
        path.relative_to(ROOT / top).as_posix()
        for top in ("bert_keras", "pipelines")
        for path in (ROOT / top).rglob("*.py")
        if path.name != "__init__.py"
    }


def test_the_architecture_page_names_every_module():
    """The page draws the house as it is: every module is named, by its path from its tier's
    folder, and every module path it names under a tier folder is one that exists."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/.-])((?:\w+/)*\w+\.py)\b", page))
    modules = module_names()
    missing = sorted(modules - named)
    folders = {name.split("/")[0] for name in modules if "/" in name}
    places = (ROOT, ROOT / "bert_keras", ROOT / "pipelines", ROOT / "tests")
    gone = sorted(
        name
        for name in named
        if name.split("/")[0] in folders and not any((place / name).is_file() for place in places)
    )
    assert not missing and not gone, (
        f"modules docs/architecture.md does not name: {missing}; names of no module: {gone}"
    )

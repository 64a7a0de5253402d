"""`bert_keras.compat.check()` passes on the installed Keras, TensorFlow and tf.text, and
each of its checks fails once its hook is taken away (so a release that stops calling a
hook is caught, not only one that removes the symbol)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bert_keras import compat

ROOT = Path(__file__).resolve().parents[1]


def test_check_passes_on_two_replicas():
    """docs/development.md's block, as written: two CPU devices, so that the clipping check
    also runs on two replicas (the sum is clipped, not each replica's share)."""
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "development.md").read_text(), re.S)
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout == "replicas 2\n"


def test_clipping_check_fails_without_the_hook(monkeypatch):
    monkeypatch.delattr(compat.ClipsSummedGradients, "_all_reduce_sum_gradients")
    with pytest.raises(AssertionError, match="moved the weights by 10.0000"):
        compat._check_clipping()


def test_tensorboard_check_fails_with_keras_own_epoch_logging(monkeypatch):
    """Keras 3.15 still loses the held-out metrics of an epoch that ends off `update_freq`."""
    monkeypatch.delattr(compat.TensorBoard, "_log_epoch_metrics")
    with pytest.raises(AssertionError, match=r"held-out epoch_loss reached the validation log at epochs \{1\}"):
        compat._check_tensorboard()


def test_tensorboard_check_fails_without_the_epochs_last_step(monkeypatch):
    monkeypatch.delattr(compat.TensorBoard, "on_epoch_end")
    with pytest.raises(AssertionError, match=r"batch_loss was logged at steps \{2, 4, 6\}"):
        compat._check_tensorboard()


@pytest.mark.parametrize("hook", ["accept_raw_inputs", "keep_input_dtype"])
def test_raw_inputs_check_fails_when_keras_converts_them(monkeypatch, hook):
    monkeypatch.setattr(compat, hook, lambda layer: None)
    with pytest.raises(AssertionError, match=hook):
        compat._check_raw_inputs()


def test_compile_check_fails_when_loading_skips_compile(monkeypatch):
    monkeypatch.delattr(compat.RestoresCompile, "compile_from_config")
    with pytest.warns(UserWarning, match="compile"), pytest.raises(AssertionError, match="RestoresCompile"):
        compat._check_restores_compile()


def test_multi_worker_check_fails_on_unpatched_keras(monkeypatch):
    from keras.src.backend.tensorflow import trainer

    monkeypatch.setattr(compat, "patch_multi_worker_fit", lambda: None)
    monkeypatch.setattr(trainer, "reduce_per_replica", lambda values, strategy, reduction: values)
    with pytest.raises(AssertionError, match="reduce_per_replica is not the patched one"):
        compat._check_multi_worker_patch()


def test_multi_worker_patch_is_skipped_once_keras_has_the_fix(monkeypatch):
    monkeypatch.setattr(compat, "KERAS_20585_FIXED_IN", compat.keras_version())
    assert not compat.multi_worker_fit_needs_patch()
    monkeypatch.setattr(compat, "KERAS_20585_FIXED_IN", (compat.keras_version()[0] + 1, 0))
    assert compat.multi_worker_fit_needs_patch()


def test_pins_hold_the_installed_versions():
    """The minor versions pyproject.toml pins are the ones this suite runs on."""
    from importlib import metadata

    from packaging.requirements import Requirement

    pinned = {Requirement(line).name: Requirement(line) for line in project()["dependencies"]}
    for name in ("keras", "tensorflow", "tensorflow-text", "tensorflow-serving-api"):
        assert metadata.version(name) in pinned[name].specifier, (name, metadata.version(name), pinned[name])
        upper = [spec for spec in pinned[name].specifier if spec.operator == "<"]
        assert upper, f"{name} has no upper bound in pyproject.toml: a new minor release could break compat's hooks"


def test_base_install_resolves_like_the_dev_install():
    """Every upper bound that a dev extra's package (installed here) puts on a package of
    the base install is declared by the base too, so `pip install -e .` and `.[dev]`
    resolve the same versions (a fresh clone found apache-beam's caps on protobuf, pillow
    and python-dateutil replacing the demo's versions)."""
    from packaging.requirements import Requirement

    base = {Requirement(line).name.lower(): Requirement(line) for line in project()["dependencies"]}
    base_closure = closure(base.values())
    dev_only = closure(Requirement(line) for line in project()["optional-dependencies"]["dev"]) - base_closure
    missing = []
    for package in sorted(dev_only):
        for requirement in requirements_of(package):
            name = requirement.name.lower()
            cap = upper_bound(requirement)
            if name in base_closure and cap and not (name in base and (upper_bound(base[name]) or cap) <= cap):
                missing.append(f"{package} requires {requirement}")
    assert not missing, "cap these in pyproject.toml's dependencies too:\n" + "\n".join(missing)


def project():
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements_of(package, extras=()):
    """The requirements of an installed distribution that apply here, with `extras`."""
    from importlib import metadata

    from packaging.requirements import Requirement

    requirements = [Requirement(line) for line in metadata.requires(package) or ()]
    return [
        r
        for r in requirements
        if r.marker is None or any(r.marker.evaluate({"extra": extra}) for extra in ("", *extras))
    ]


def closure(requirements):
    """The lower-cased names of the installed distributions `requirements` pull in."""
    names, todo = set(), [(r.name.lower(), tuple(r.extras)) for r in requirements]
    while todo:
        name, extras = todo.pop()
        if (name, extras) not in names:
            names.add((name, extras))
            todo.extend((r.name.lower(), tuple(r.extras)) for r in requirements_of(name, extras))
    return {name for name, _ in names}


def upper_bound(requirement):
    """The release tuple of a requirement's `<`/`<=` bound (7.0.0.dev0 counts as 7), or None."""
    from packaging.version import Version

    bounds = [Version(spec.version).release for spec in requirement.specifier if spec.operator in ("<", "<=")]
    return min((tuple(b) + (0,) * (4 - len(b)) for b in bounds), default=None)

"""`compat_check.check()` passes on the installed Keras, TensorFlow and tf.text, and each
of its checks fails once its hook is taken away (so a release that stops calling a hook is
caught, not only one that removes the symbol)."""

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import compat_check
import keras
import pytest

from bert_keras import compat

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_check_passes_on_two_replicas():
    """docs/development.md's block, as written: two CPU devices, so that the clipping and
    keras#20585 checks also run on two replicas (the sum is clipped, not each replica's share;
    a model of token ids builds)."""
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
        compat_check._check_clipping()


def test_tensorboard_check_fails_with_keras_own_epoch_logging(monkeypatch):
    """Keras 3.15 still loses the held-out metrics of an epoch that ends off `update_freq`."""
    monkeypatch.delattr(compat.TensorBoard, "_log_epoch_metrics")
    with pytest.raises(AssertionError, match=r"held-out epoch_loss reached the validation log at epochs \{1\}"):
        compat_check._check_tensorboard()


def test_tensorboard_check_fails_without_the_epochs_last_step(monkeypatch):
    monkeypatch.delattr(compat.TensorBoard, "on_epoch_end")
    with pytest.raises(AssertionError, match=r"batch_loss was logged at steps \{2, 4, 6\}"):
        compat_check._check_tensorboard()


def test_tensorboard_check_fails_when_a_step_is_logged_after_its_batch(monkeypatch):
    """Keras 3.15 flushes a step's summaries when the next batch begins, after a backup of the step."""

    def keras_own(self, batch, logs=None):
        keras.callbacks.TensorBoard.on_train_batch_end(self, batch, logs)
        self.batch_logs = logs

    monkeypatch.setattr(compat.TensorBoard, "on_train_batch_end", keras_own)
    with pytest.raises(AssertionError, match=r"on disk at steps \[None, None, \{2\}, \{2, 3\}"):
        compat_check._check_tensorboard()


@pytest.mark.parametrize("hook", ["accept_raw_inputs", "keep_input_dtype"])
def test_raw_inputs_check_fails_when_keras_converts_them(monkeypatch, hook):
    monkeypatch.setattr(compat_check, hook, lambda layer: None)
    with pytest.raises(AssertionError, match=hook):
        compat_check._check_raw_inputs()


def test_write_archive_check_fails_with_keras_own_write_out(monkeypatch):
    """TensorFlow 2.21 still traces an endpoint again when it saves it (tensorflow/tensorflow#56370)."""
    monkeypatch.setattr(compat_check, "write_archive", lambda archive, path: archive.write_out(path, verbose=False))
    with pytest.raises(AssertionError, match="traced 2 times"):
        compat_check._check_write_archive()


def test_compile_check_fails_when_loading_skips_compile(monkeypatch):
    monkeypatch.delattr(compat.RestoresCompile, "compile_from_config")
    with pytest.warns(UserWarning, match="compile"), pytest.raises(AssertionError, match="RestoresCompile"):
        compat_check._check_restores_compile()


def test_build_check_fails_without_the_hook(monkeypatch):
    """Keras' own lazy build, the hook taken away: each step is traced twice."""
    monkeypatch.setattr(compat.BuildsBeforeTracing, "_build_before_tracing", lambda model, data: None)
    with pytest.raises(AssertionError, match=r"traced the steps \{'train': 2, 'test': 2\} times"):
        compat_check._check_builds_before_tracing()


def test_draws_deferred_check_fails_when_nothing_is_deferred(monkeypatch):
    monkeypatch.setattr(compat_check, "draws_deferred", contextlib.nullcontext)
    with pytest.raises(AssertionError, match="kernels were drawn inside the block"):
        compat_check._check_draws_deferred()


def test_draws_deferred_check_fails_when_writes_are_not_seen(monkeypatch):
    """A Keras whose `assign` no longer goes through `_direct_assign` would have zeros that a
    load wrote drawn over."""
    from keras.src.backend.tensorflow.core import Variable

    keras_assign = Variable._direct_assign
    monkeypatch.setattr(Variable, "assign", lambda variable, value: keras_assign(variable, value))
    monkeypatch.setattr(Variable, "_direct_assign", lambda variable, value: None)
    with pytest.raises(AssertionError, match="a kernel written with zeros was drawn over"):
        compat_check._check_draws_deferred()


def test_one_block_defers_at_a_time():
    """A block entered in another thread while one runs defers nothing (its layer is drawn at
    once), and the running block still defers its own layer and draws it on leaving."""
    import threading

    import numpy as np

    layers = {}

    def build(name):
        layers[name] = keras.layers.Dense(3)
        layers[name].build((None, 2))

    def other_thread():
        with compat.draws_deferred():
            build("other")
            layers["other inside"] = layers["other"].kernel.numpy()

    with compat.draws_deferred():
        build("own")
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        own_inside = layers["own"].kernel.numpy()
    assert np.any(layers["other inside"]) and not np.any(own_inside) and np.any(layers["own"].kernel.numpy())


def test_keras_20585_check_fails_when_the_workaround_patches_nothing(monkeypatch):
    monkeypatch.setattr(compat_check, "keras_20585_workaround", lambda strategy: contextlib.nullcontext())
    with pytest.raises(AssertionError, match="is not the patched one inside the block"):
        compat_check._check_keras_20585_workaround()


def test_keras_20585_check_fails_when_the_patch_outlives_its_block(monkeypatch):
    blocks = []

    @contextlib.contextmanager
    def leaking(strategy):
        blocks.append(compat.keras_20585_workaround(strategy))
        blocks[-1].__enter__()
        yield

    monkeypatch.setattr(compat_check, "keras_20585_workaround", leaking)
    try:
        with pytest.raises(AssertionError, match="Keras' own trainer functions are not back after the block"):
            compat_check._check_keras_20585_workaround()
    finally:
        for block in reversed(blocks):
            block.__exit__(None, None, None)
    assert not compat.keras_20585_patched()


@pytest.mark.slow
def test_keras_20585_still_bites_two_mirrored_replicas():
    """Unpatched Keras cannot build a model of token ids under `fit` on two mirrored replicas
    (the build averages the replicas' batches into floats): the workaround is needed beyond
    multi-worker. Fails once Keras builds it: then see KERAS_20585_FIXED_IN."""
    code = (
        "import sys, tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "sys.path.insert(0, 'tests')\n"
        "import compat_check\n"
        "try:\n"
        "    compat_check._fit_integer_inputs(tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1']))\n"
        "except AssertionError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "fit on 2 replicas failed to build a model of integer inputs" in result.stdout, result.stdout
    assert "token ids must be integers, got float32" in result.stdout, result.stdout


def test_keras_20585_workaround_is_skipped_once_keras_has_the_fix(monkeypatch):
    two_replicas = type("TwoReplicas", (), {"num_replicas_in_sync": 2})()
    one_replica = type("OneReplica", (), {"num_replicas_in_sync": 1})()
    monkeypatch.setattr(compat, "KERAS_20585_FIXED_IN", compat.keras_version())
    assert not compat.keras_20585_unfixed() and not compat.keras_20585_affects(two_replicas)
    with compat.keras_20585_workaround(two_replicas):
        assert not compat.keras_20585_patched()
    monkeypatch.setattr(compat, "KERAS_20585_FIXED_IN", (compat.keras_version()[0] + 1, 0))
    assert compat.keras_20585_unfixed() and compat.keras_20585_affects(two_replicas)
    assert not compat.keras_20585_affects(one_replica)


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
    from packaging.utils import canonicalize_name

    base = {canonicalize_name(Requirement(line).name): Requirement(line) for line in project()["dependencies"]}
    base_closure = closure(base.values())
    dev_only = closure(Requirement(line) for line in project()["optional-dependencies"]["dev"]) - base_closure
    missing = []
    for package in sorted(dev_only):
        for requirement in requirements_of(package):
            name = canonicalize_name(requirement.name)
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
    """The canonical names (huggingface_hub and huggingface-hub are one) of the installed
    distributions `requirements` pull in."""
    from packaging.utils import canonicalize_name

    names, todo = set(), [(canonicalize_name(r.name), tuple(r.extras)) for r in requirements]
    while todo:
        name, extras = todo.pop()
        if (name, extras) not in names:
            names.add((name, extras))
            todo.extend((canonicalize_name(r.name), tuple(r.extras)) for r in requirements_of(name, extras))
    return {name for name, _ in names}


def upper_bound(requirement):
    """The release tuple of a requirement's `<`/`<=` bound (7.0.0.dev0 counts as 7), or None."""
    from packaging.version import Version

    bounds = [Version(spec.version).release for spec in requirement.specifier if spec.operator in ("<", "<=")]
    return min((tuple(b) + (0,) * (4 - len(b)) for b in bounds), default=None)

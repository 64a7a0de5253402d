"""`bert_keras.compat.check()` passes on the installed Keras, TensorFlow and tf.text, and
each of its checks fails once its hook is taken away (so a release that stops calling a
hook is caught, not only one that removes the symbol)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bert_keras import compat

ROOT = Path(__file__).resolve().parents[1]
# Two CPU devices, so that the clipping check also runs on two replicas (the sum is
# clipped, not each replica's share); the runtime's devices are fixed before first use.
CHECK_ON_TWO_REPLICAS = """
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)
from bert_keras import compat
compat.check()
print("replicas", len(tf.config.list_logical_devices("CPU")))
"""


def test_check_passes_on_two_replicas():
    result = subprocess.run(
        [sys.executable, "-c", CHECK_ON_TWO_REPLICAS],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "replicas 2" in result.stdout


def test_clipping_check_fails_without_the_hook(monkeypatch):
    monkeypatch.delattr(compat.ClipsSummedGradients, "_all_reduce_sum_gradients")
    with pytest.raises(AssertionError, match="moved the weights by 10.0000"):
        compat._check_clipping()


def test_tensorboard_check_fails_with_keras_own_epoch_logging(monkeypatch):
    """Keras 3.15 still loses the held-out metrics of an epoch that ends off `update_freq`."""
    monkeypatch.delattr(compat.TensorBoard, "_log_epoch_metrics")
    with pytest.raises(AssertionError, match="held-out epoch_loss did not reach"):
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

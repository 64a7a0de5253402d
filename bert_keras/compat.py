"""Every use of a private Keras, TensorFlow or tf.text symbol, in one place.

The rest of bert_keras uses public APIs only (tests/test_architecture.py looks for
`keras.src`, `tensorflow.python`, `_pywrap` and the hooks below elsewhere). Each hook
relies on internals a minor release may change without notice, so `check()` runs each
one on the installed versions and raises if one no longer takes effect; tests/test_compat.py
runs it, and docs/development.md says what to do when it fails.

The hooks:
- `ClipsSummedGradients`: optimizer mixin, global-norm clipping of the gradient summed
  over replicas (overrides `_clip_gradients` and `_all_reduce_sum_gradients`).
- `variable_index`: a variable's slot in the optimizer's per-variable lists (`_get_variable_index`).
- `TensorBoard`: epoch metrics and each epoch's last step written whatever the batch-level
  summary condition (overrides `_log_epoch_metrics`, writes with `_train_writer`).
- `accept_raw_inputs` / `keep_input_dtype`: a layer's call gets its inputs as given
  (`_convert_input_args`, `_allow_non_tensor_positional_args`).
- `RestoresCompile`: `.keras` loading compiles a model whose `compile` is overridden
  (`compile_from_config`, which Keras skips for those).
- `patch_multi_worker_fit`: keras-team/keras#20585, `fit` under tf.distribute strategies
  (patches `keras.src.backend.tensorflow.trainer`).
- `saved_object`: a bare SavedModel object (`tf.__internal__.tracking.AutoTrackable`).
- `dataset_graph`: the graph of a `tf.data.Dataset` (`_as_serialized_graph`), for tests.
- `onednn_enabled`: whether TensorFlow runs oneDNN kernels (`_pywrap_util_port`), for tests.
"""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# The first Keras release with the upstream fix of keras-team/keras#20585 (None: not
# fixed yet, patch every Keras 3). tests/training/test_distribute.py runs unpatched Keras
# on two workers and fails once the bug is gone: then set this to that Keras version.
KERAS_20585_FIXED_IN = None


class ClipsSummedGradients:
    """Mixin for a `keras.optimizers.Optimizer` (listed before it): `global_clipnorm`
    clips the gradient summed over replicas, as one device would. Keras clips each
    replica's share before summing the shares, so N replicas would not train as one
    device does. `gradient_to_clip` prepares each summed gradient (e.g. densifies it)."""

    def gradient_to_clip(self, gradient):
        return gradient

    def _clip_gradients(self, grads):
        return grads  # clipped after the cross-replica sum, in _all_reduce_sum_gradients

    def _all_reduce_sum_gradients(self, grads_and_vars):
        reduced = super()._all_reduce_sum_gradients(grads_and_vars)
        clipped = super()._clip_gradients([self.gradient_to_clip(gradient) for gradient, _ in reduced])
        return list(zip(clipped, [variable for _, variable in reduced]))


def variable_index(optimizer, variable):
    """The index of `variable` (as `update_step` receives it) in the lists that
    `optimizer.add_optimizer_variables` returned when it was built."""
    return optimizer._get_variable_index(variable)


class TensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` that records every epoch's metrics, held-out ones
    included, and the training metrics of every epoch's last step. Keras 3.15 writes both
    under its batch-level condition (global batch a multiple of `update_freq`), so an
    epoch ending on any other batch lost them: a run of 2,000 steps checkpointed every 333
    with `update_freq` 33 logged no held-out curve, and its logs ended at step 1,980."""

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self.batches, self.batch_logs = 0, None

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        self.batches, self.batch_logs = self.batches + 1, logs

    def on_epoch_end(self, epoch, logs=None):
        if self.update_freq != "epoch" and isinstance(self.batch_logs, dict):
            # The epoch's last step, numbered as Keras numbers batch summaries (from 1 per `fit`).
            with tf.summary.record_if(True), self._train_writer.as_default():
                for name, value in self.batch_logs.items():
                    tf.summary.scalar(f"batch_{name}", value, step=self.batches)
        super().on_epoch_end(epoch, logs)

    def _log_epoch_metrics(self, epoch, logs):
        with tf.summary.record_if(True):
            super()._log_epoch_metrics(epoch, logs)


def accept_raw_inputs(layer):
    """`layer(...)` passes its inputs through as given (strings, lists, ragged tensors,
    Python ints): Keras neither converts them to tensors nor rejects non-tensor arguments."""
    keep_input_dtype(layer)
    layer._allow_non_tensor_positional_args = True


def keep_input_dtype(layer):
    """`layer(x)` gets `x` in its own dtype: no autocast to the layer's compute dtype
    (a float32 residual stream under a bfloat16 policy stays float32)."""
    layer._convert_input_args = False


class RestoresCompile:
    """Mixin for a `keras.Model` (listed before it) that overrides `compile`: loading a
    `.keras` file compiles it with the saved settings. Keras skips `compile_from_config`
    for models that override `compile`; this `compile` must then only fill defaults."""

    def compile_from_config(self, config):
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)


def keras_version():
    return tuple(int(part) for part in keras.version().split(".")[:2])


def multi_worker_fit_needs_patch():
    """Whether the installed Keras is one keras-team/keras#20585 affects."""
    version = keras_version()
    return version >= (3, 0) and (KERAS_20585_FIXED_IN is None or version < KERAS_20585_FIXED_IN)


def patch_multi_worker_fit():
    """Patches keras-team/keras#20585 in this process (idempotent; a no-op where not needed).

    Keras 3's TensorFlow trainer breaks on a multi-worker strategy in two places:
    1. `_maybe_symbolic_build` takes one distributed batch and `strategy.reduce`s it
       ("MEAN") to a plain batch; the collective reduce cannot convert the `PerReplica`
       input ("Attempt to convert a value (PerReplica...) ... to a Tensor"). Under
       MirroredStrategy the same reduce turns integer token ids into floats, so a model
       with compiled losses or metrics fails to build.
    2. `reduce_per_replica` reduces the step's scalar metrics with
       `strategy.reduce("MEAN", v, axis=0)`, which fails on scalars.
    The fix: build from the first local replica's batch (only its shapes and dtypes
    matter), and on multi-worker strategies average scalars over replicas with
    `axis=None`; everything else goes to Keras' own code. `resolve_strategy` calls this
    for every strategy but "default".
    """
    if not multi_worker_fit_needs_patch():
        return
    from keras.src.backend.tensorflow import trainer

    missing = [
        name
        for name, owner in (
            ("_maybe_symbolic_build", trainer.TensorFlowTrainer),
            ("reduce_per_replica", trainer),
            ("_collective_all_reduce_multi_worker", trainer),
        )
        if not hasattr(owner, name)
    ]
    if missing:
        raise RuntimeError(
            f"Keras {keras.version()} no longer has {missing}: bert_keras.compat cannot patch "
            "keras-team/keras#20585; check whether Keras fixed it and update KERAS_20585_FIXED_IN"
        )
    if getattr(trainer.reduce_per_replica, "patched_for_keras_20585", False):
        return
    multi_worker = trainer._collective_all_reduce_multi_worker
    keras_build = trainer.TensorFlowTrainer._maybe_symbolic_build
    keras_reduce = trainer.reduce_per_replica

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if iterator is not None and strategy is not None:
            for _, _, steps in iterator:
                try:
                    batch = next(steps)
                except StopIteration:
                    raise ValueError(
                        "this worker's input pipeline gave no batch: its share of the data is "
                        "empty (too few records or files for the batch size and workers)"
                    ) from None
                break
            data_batch = tf.nest.map_structure(lambda value: strategy.experimental_local_results(value)[0], batch)
            iterator = None
        return keras_build(self, iterator=iterator, data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and multi_worker(strategy):
            return tf.nest.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)
        return keras_reduce(values, strategy, reduction)

    reduce_per_replica.patched_for_keras_20585 = True
    trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    trainer.reduce_per_replica = reduce_per_replica


def saved_object():
    """An empty object whose attributes `tf.saved_model.save` tracks: functions, variables
    and plain lists, with no attributes of its own (`tf.Module` has read-only `variables`)."""
    return tf.__internal__.tracking.AutoTrackable()


def dataset_graph(dataset):
    """The `tf.compat.v1.GraphDef` that runs `dataset` (its ops and functions)."""
    return tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())


def onednn_enabled():
    """Whether this TensorFlow build runs oneDNN kernels (off with TF_ENABLE_ONEDNN_OPTS=0)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def check():
    """Runs every hook on the installed Keras, TensorFlow and tf.text and raises
    `AssertionError` naming the first that no longer takes effect. A few seconds, on CPU."""
    _check_clipping()
    _check_variable_index()
    _check_tensorboard()
    _check_raw_inputs()
    _check_restores_compile()
    _check_multi_worker_patch()
    _check_saved_object()
    _check_dataset_graph()
    _check_onednn_enabled()


class _ClippedSGD(ClipsSummedGradients, keras.optimizers.SGD):
    pass


def _check_clipping():
    """One replica and, where the process has two CPU devices, two: a gradient of norm 10
    per replica moves the weights by exactly `global_clipnorm`, the sum being clipped
    (not each replica's share)."""
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    strategies = [tf.distribute.get_strategy()]
    if len(devices) >= 2:
        strategies.append(tf.distribute.MirroredStrategy(devices[:2]))
    for strategy in strategies:
        moved = _clipped_step(strategy)
        assert abs(moved - 1.0) < 1e-5, (
            f"ClipsSummedGradients: a step on {strategy.num_replicas_in_sync} replica(s) moved the weights by "
            f"{moved:.4f}, not the clip norm 1.0: Keras' _clip_gradients/_all_reduce_sum_gradients changed"
        )


def _clipped_step(strategy):
    """How far one clipped SGD step (learning rate 1) moves weights at 0."""
    with strategy.scope():
        variable = keras.Variable(np.zeros(4, "float32"))
        optimizer = _ClippedSGD(learning_rate=1.0, global_clipnorm=1.0, name="clipped_sgd")
        optimizer.build([variable])

    def step():
        optimizer.apply_gradients([(tf.constant([5.0, 5.0, 5.0, 5.0]), variable)])

    strategy.run(tf.function(step))
    return float(np.linalg.norm(keras.ops.convert_to_numpy(variable)))


def _check_variable_index():
    class Recording(keras.optimizers.Optimizer):
        def build(self, var_list):
            super().build(var_list)
            self.seen = []

        def update_step(self, gradient, variable, learning_rate):
            self.seen.append(variable_index(self, variable))

    variables = [keras.Variable(np.zeros(2, "float32")), keras.Variable(np.zeros(3, "float32"))]
    optimizer = Recording(learning_rate=0.1)
    optimizer.apply_gradients([(tf.ones(2), variables[0]), (tf.ones(3), variables[1])])
    assert optimizer.seen == [0, 1], f"variable_index: update_step's variables gave indices {optimizer.seen}"


def _check_tensorboard():
    """Epochs of 3 batches with `update_freq=2` end off the batch-level condition; their
    held-out metrics and their last step's training loss must still reach the logs."""
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((6, 2), "float32"), np.ones((6, 1), "float32")
    with tempfile.TemporaryDirectory() as logs:
        callback = TensorBoard(logs, update_freq=2)
        model.fit(x, y, batch_size=2, epochs=2, validation_data=(x, y), verbose=0, callbacks=[callback])
        validation, train = (_logged_steps(Path(logs) / split) for split in ("validation", "train"))
    assert validation.get("epoch_loss") == {0, 1}, (
        f"TensorBoard: the held-out epoch_loss reached the validation log at epochs {validation.get('epoch_loss')}, "
        "not 0 and 1: Keras' _log_epoch_metrics changed"
    )
    assert train.get("batch_loss") == {2, 3, 4, 6}, (
        f"TensorBoard: batch_loss was logged at steps {train.get('batch_loss')}, not 2, 3 (the first epoch's end), "
        "4 and 6: Keras' batch summaries changed"
    )


def _logged_steps(folder):
    """{tag: {steps}} of the scalar summaries in a TensorBoard log folder."""
    steps = {}
    for events in folder.glob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(events)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                steps.setdefault(value.tag, set()).add(event.step)
    return steps


def _check_raw_inputs():
    class Seen(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            accept_raw_inputs(self)
            self.built = True

        def call(self, inputs, length):
            self.seen = (inputs, length)
            return tf.constant(0.0)

    layer = Seen()
    try:
        layer(["a", "b"], 3)
    except (TypeError, ValueError) as error:
        raise AssertionError(f"accept_raw_inputs: Keras refused a list and an int: {error}") from error
    inputs, length = layer.seen
    assert isinstance(inputs, list) and isinstance(length, int), (
        f"accept_raw_inputs: the layer got {layer.seen!r}, not the list and int it was called with"
    )

    class Dtype(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            keep_input_dtype(self)

        def call(self, inputs):
            self.seen = inputs.dtype
            return inputs

    layer = Dtype(dtype="mixed_bfloat16")
    layer(tf.ones((1, 2), "float32"))
    assert layer.seen == tf.float32, f"keep_input_dtype: a mixed_bfloat16 layer got {layer.seen.name} inputs"


@keras.saving.register_keras_serializable(package="bert_keras_compat_check")
class _CompilingModel(RestoresCompile, keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1)

    def call(self, inputs):
        return self.dense(inputs)

    def compile(self, optimizer="sgd", loss="mse", **kwargs):
        super().compile(optimizer=optimizer, loss=loss, **kwargs)


def _check_restores_compile():
    model = _CompilingModel()
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.25), loss="mae")
    model(np.ones((1, 2), "float32"))
    model.optimizer.build(model.trainable_variables)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
    optimizer = getattr(loaded, "optimizer", None)
    assert isinstance(optimizer, keras.optimizers.Adam) and abs(float(optimizer.learning_rate) - 0.25) < 1e-7, (
        f"RestoresCompile: the loaded model's optimizer is {optimizer!r}, not the saved Adam(0.25): "
        "Keras' compile_from_config changed"
    )


def _check_multi_worker_patch():
    if not multi_worker_fit_needs_patch():
        return
    patch_multi_worker_fit()  # raises if its targets are gone
    from keras.src.backend.tensorflow import trainer

    assert getattr(trainer.reduce_per_replica, "patched_for_keras_20585", False), (
        "patch_multi_worker_fit: keras.src.backend.tensorflow.trainer.reduce_per_replica is not the patched one"
    )
    assert trainer.TensorFlowTrainer._maybe_symbolic_build.__module__ == __name__, (
        "patch_multi_worker_fit: TensorFlowTrainer._maybe_symbolic_build is not the patched one"
    )
    # Keras must still call the patched names: fit's build goes through _maybe_symbolic_build.
    calls = []
    patched = trainer.TensorFlowTrainer._maybe_symbolic_build

    def recording(self, *args, **kwargs):
        calls.append(True)
        return patched(self, *args, **kwargs)

    trainer.TensorFlowTrainer._maybe_symbolic_build = recording
    try:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            inputs = keras.Input((2,))
            model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
            model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        model.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), batch_size=2, verbose=0)
    finally:
        trainer.TensorFlowTrainer._maybe_symbolic_build = patched
    assert calls, "patch_multi_worker_fit: fit under a strategy no longer calls TensorFlowTrainer._maybe_symbolic_build"


def _check_saved_object():
    root = saved_object()
    root.variables = [tf.Variable(2.0)]
    root.__call__ = tf.function(lambda x: x * root.variables[0], input_signature=[tf.TensorSpec([], tf.float32)])
    with tempfile.TemporaryDirectory() as folder:
        tf.saved_model.save(root, folder)
        loaded = tf.saved_model.load(folder)
        value = float(loaded(tf.constant(3.0)))
    assert value == 6.0 and len(loaded.variables) == 1, f"saved_object: the loaded object answered {value}"


def _check_dataset_graph():
    graph = dataset_graph(tf.data.Dataset.range(3).map(lambda x: x + 1))
    ops = {node.op for node in graph.node}
    assert {"RangeDataset", "MapDataset"} <= ops, f"dataset_graph: the graph has ops {sorted(ops)}"


def _check_onednn_enabled():
    switch = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if switch in ("0", "1"):
        assert onednn_enabled() == (switch == "1"), f"onednn_enabled() disagrees with TF_ENABLE_ONEDNN_OPTS={switch}"
    else:
        assert isinstance(onednn_enabled(), bool)

"""The self-check of bert_keras.compat: each private hook still takes effect on the
installed Keras, TensorFlow and tf.text.

`check()` runs every hook and raises `AssertionError` naming the first that no longer
takes effect (a few seconds, on CPU). tests/test_compat.py runs it on two CPU devices,
as docs/development.md's block does, and takes each hook away to see its check fail.
It lives with the tests: importing bert_keras registers and patches nothing of its own.
"""

import functools
import os
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.compat import (
    BuildsBeforeTracing,
    ClipsSummedGradients,
    RestoresCompile,
    TensorBoard,
    accept_raw_inputs,
    dataset_graph,
    draws_deferred,
    fast_wordpiece_model,
    keep_input_dtype,
    keras_20585_unfixed,
    keras_20585_workaround,
    onednn_enabled,
    saved_object,
    variable_index,
    write_archive,
)


def check():
    """Runs every hook on the installed Keras, TensorFlow and tf.text and raises
    `AssertionError` naming the first that no longer takes effect. A few seconds, on CPU."""
    _check_clipping()
    _check_variable_index()
    _check_tensorboard()
    _check_raw_inputs()
    _check_restores_compile()
    _check_builds_before_tracing()
    _check_keras_20585_workaround()
    _check_write_archive()
    _check_saved_object()
    _check_dataset_graph()
    _check_fast_wordpiece_model()
    _check_onednn_enabled()
    _check_draws_deferred()


@functools.cache
def _two_cpus():
    """A mirrored strategy over the process's first two CPU devices (None with fewer), one
    for every check: a second instance's collectives would share the first one's keys."""
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices[:2]) if len(devices) >= 2 else None


class _ClippedSGD(ClipsSummedGradients, keras.optimizers.SGD):
    pass


def _check_clipping():
    """One replica and, where the process has two CPU devices, two: a gradient of norm 10
    per replica moves the weights by exactly `global_clipnorm`, the sum being clipped
    (not each replica's share)."""
    strategies = [tf.distribute.get_strategy()]
    if _two_cpus():
        strategies.append(_two_cpus())
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
    held-out metrics and their last step's training loss must still reach the logs. A
    second `fit` (a resumed run) numbers its steps on from the optimizer's. A step's
    summaries are on disk for the callbacks after it (a backup) when its batch ends."""
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((6, 2), "float32"), np.ones((6, 1), "float32")
    with tempfile.TemporaryDirectory() as logs:
        callback, on_disk, train_log = TensorBoard(logs, update_freq=2), [], Path(logs) / "train"
        after = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: on_disk.append(_logged_steps(train_log).get("batch_loss"))
        )
        model.fit(x, y, batch_size=2, epochs=2, validation_data=(x, y), verbose=0, callbacks=[callback, after])
        validation, train = (_logged_steps(Path(logs) / split) for split in ("validation", "train"))
        model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[TensorBoard(logs, update_freq=2)])
        resumed = _logged_steps(Path(logs) / "train")
    assert validation.get("epoch_loss") == {0, 1}, (
        f"TensorBoard: the held-out epoch_loss reached the validation log at epochs {validation.get('epoch_loss')}, "
        "not 0 and 1: Keras' _log_epoch_metrics changed"
    )
    assert train.get("batch_loss") == {2, 3, 4, 6}, (
        f"TensorBoard: batch_loss was logged at steps {train.get('batch_loss')}, not 2, 3 (the first epoch's end), "
        "4 and 6: Keras' batch summaries changed"
    )
    assert resumed.get("batch_loss") == {2, 3, 4, 6, 8, 9}, (
        f"TensorBoard: a second fit logged batch_loss at steps {resumed.get('batch_loss')}, not on from step 6 "
        "(8, 9): Keras' TensorBoard._global_train_batch changed"
    )
    assert on_disk == [None, {2}, {2}, {2, 3, 4}, {2, 3, 4}, {2, 3, 4, 6}], (
        f"TensorBoard: after each step, batch_loss was on disk at steps {on_disk}, not up to that step: "
        "Keras' batch summaries no longer go to TensorBoard._train_writer"
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


class _CompilingModel(RestoresCompile, keras.Model):
    """Registered with no package: `.keras` loading finds it through `custom_objects`."""

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
        loaded = keras.saving.load_model(path, custom_objects={"_CompilingModel": _CompilingModel})
    optimizer = getattr(loaded, "optimizer", None)
    assert isinstance(optimizer, keras.optimizers.Adam) and abs(float(optimizer.learning_rate) - 0.25) < 1e-7, (
        f"RestoresCompile: the loaded model's optimizer is {optimizer!r}, not the saved Adam(0.25): "
        "Keras' compile_from_config changed"
    )


class _TracedModel(BuildsBeforeTracing, keras.Model):
    """A model with a compiled metric that counts how often Keras traces its steps."""

    def __init__(self):
        super().__init__(name="traced_model")
        self.dense = keras.layers.Dense(2)
        self.traces = {"train": 0, "test": 0}

    def call(self, inputs):
        return self.dense(inputs)

    def train_step(self, data):
        self.traces["train"] += 1
        return super().train_step(data)

    def test_step(self, data):
        self.traces["test"] += 1
        return super().test_step(data)


def _check_builds_before_tracing():
    """`evaluate`, then `fit`, on a dataset trace each step once, the optimizer's and the
    metric's variables made before them (Keras' own lazy build traces each twice)."""
    model = _TracedModel()
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    data = tf.data.Dataset.from_tensor_slices((np.ones((4, 3), "float32"), np.array([0, 1, 0, 1]))).batch(2)
    model.evaluate(data, verbose=0)
    model.fit(data, epochs=1, verbose=0)
    assert model.traces == {"train": 1, "test": 1}, (
        f"BuildsBeforeTracing: Keras traced the steps {model.traces} times: "
        "Trainer._symbolic_build or TensorFlowTrainer._distribute_strategy changed"
    )


def _check_keras_20585_workaround():
    """Inside the block, and only for a strategy of more than one replica, Keras' trainer
    functions are the patched ones and a model of integer inputs builds on two replicas;
    after the block Keras' own are back; and `fit` still goes through the patched build."""
    if not keras_20585_unfixed():
        return
    from keras.src.backend.tensorflow import trainer

    keras_own = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
    two = _two_cpus()
    with keras_20585_workaround(two or type("TwoReplicas", (), {"num_replicas_in_sync": 2})()):
        patched = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
        if two is not None:
            _fit_integer_inputs(two)
    assert all(getattr(function, "works_around_keras_20585", False) for function in patched), (
        "keras_20585_workaround: TensorFlowTrainer._maybe_symbolic_build or "
        "keras.src.backend.tensorflow.trainer.reduce_per_replica is not the patched one inside the block"
    )
    assert (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica) == keras_own, (
        "keras_20585_workaround: Keras' own trainer functions are not back after the block"
    )
    with keras_20585_workaround(tf.distribute.OneDeviceStrategy("/cpu:0")):
        assert (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica) == keras_own, (
            "keras_20585_workaround: patched Keras for a one-device strategy, which the bug does not affect"
        )
    # Keras must still call the patched names: fit's build goes through _maybe_symbolic_build.
    calls = []

    def recording(self, *args, **kwargs):
        calls.append(True)
        return keras_own[0](self, *args, **kwargs)

    trainer.TensorFlowTrainer._maybe_symbolic_build = recording
    try:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            inputs = keras.Input((2,))
            model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
            model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        model.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), batch_size=2, verbose=0)
    finally:
        trainer.TensorFlowTrainer._maybe_symbolic_build = keras_own[0]
    assert calls, "keras_20585_workaround: fit under a strategy no longer calls TensorFlowTrainer._maybe_symbolic_build"


class TokenIds(keras.Model):
    """Built by `fit`, from integer ids (as BertEncoder requires them)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(10, 3)
        self.dense = keras.layers.Dense(2)

    def call(self, ids):
        if not ids.dtype.is_integer:
            raise TypeError(f"token ids must be integers, got {ids.dtype.name}")
        return self.dense(keras.ops.mean(self.embedding(ids), axis=1))


def _fit_integer_inputs(strategy):
    with strategy.scope():
        model = TokenIds()
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    batches = tf.data.Dataset.from_tensors((tf.ones([4, 3], tf.int32), tf.constant([0, 1, 0, 1]))).repeat()
    try:
        model.fit(batches, steps_per_epoch=2, verbose=0)
    except (TypeError, ValueError, RuntimeError) as error:
        raise AssertionError(
            f"keras_20585_workaround: fit on {strategy.num_replicas_in_sync} replicas failed to build a model "
            f"of integer inputs: {error}"
        ) from error


def _check_write_archive():
    """An endpoint is traced once by the export and the loaded SavedModel answers as the layer:
    its signature and its attribute (Keras' `write_out` alone traces it twice)."""
    layer = keras.layers.Dense(2, kernel_initializer="ones")
    layer.build((None, 3))
    traces = []

    def serve(x):
        traces.append(x)
        return {"y": layer(x)}

    archive = keras.export.ExportArchive()
    archive.add_endpoint("serve", serve, input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    with tempfile.TemporaryDirectory() as folder:
        write_archive(archive, folder)
        loaded = tf.saved_model.load(folder)
        x = tf.constant([[1.0, 2.0, 3.0]])
        answers = [loaded.signatures["serve"](x=x)["y"].numpy(), loaded.serve(x)["y"].numpy()]
    assert len(traces) == 1, f"write_archive: the endpoint was traced {len(traces)} times: ExportArchive changed"
    for answer in answers:
        np.testing.assert_array_equal(answer, [[6.0, 6.0]])


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


def _check_fast_wordpiece_model():
    vocab = ["[UNK]", "un", "##aff", "##able", "aff", ",", "é", "##s"]
    text = tf.constant(["unaffable, affs", "éaff unknownword", "unaffableunaffable"])
    for options in [(10, False, False), (100, True, True)]:
        max_bytes, no_pretokenization, detokenize = options
        kept = tf_text.FastWordpieceTokenizer(
            vocab,
            max_bytes_per_word=max_bytes,
            no_pretokenization=no_pretokenization,
            support_detokenization=detokenize,
        )
        built = fast_wordpiece_model(vocab, max_bytes, "##", "[UNK]", no_pretokenization, detokenize)
        ours = tf_text.FastWordpieceTokenizer(model_buffer=built)
        kept_ids, ours_ids = kept.tokenize(text), ours.tokenize(text)
        assert kept_ids.to_list() == ours_ids.to_list(), f"fast_wordpiece_model{options}: {ours_ids} != {kept_ids}"
        if detokenize:
            assert ours.detokenize(ours_ids).numpy().tolist() == kept.detokenize(kept_ids).numpy().tolist()


def _check_draws_deferred():
    """Inside the block a seeded random kernel is not drawn; after it, the kernels no load
    wrote hold what they would have held, and the written ones what was written, zeros
    included."""
    layers = [
        keras.layers.Dense(3, kernel_initializer=keras.initializers.TruncatedNormal(seed=seed)) for seed in range(4)
    ]
    twins = [
        keras.layers.Dense(3, kernel_initializer=keras.initializers.TruncatedNormal(seed=seed)) for seed in range(4)
    ]
    written = np.arange(6, dtype="float32").reshape(2, 3)
    for twin in twins:
        twin.build((None, 2))
    with draws_deferred():
        for layer in layers:
            layer.build((None, 2))
        drawn = [bool(np.any(layer.kernel.numpy())) for layer in layers]
        layers[1].kernel.assign(written)
        layers[2].kernel.assign(np.zeros((2, 3), "float32"))
        layers[3].set_weights([written, np.zeros(3, "float32")])
    assert not any(drawn), f"draws_deferred: kernels were drawn inside the block ({drawn})"
    kernels = [layer.kernel.numpy() for layer in layers]
    assert np.array_equal(kernels[0], twins[0].kernel.numpy()), "draws_deferred: an unwritten kernel is not its draw"
    assert np.array_equal(kernels[1], written) and np.array_equal(kernels[3], written), (
        "draws_deferred: a written kernel was drawn over"
    )
    assert not np.any(kernels[2]), "draws_deferred: a kernel written with zeros was drawn over"

"""Every use of a private Keras, TensorFlow or tf.text symbol, in one place.

The rest of bert_keras uses public APIs only (tests/test_architecture.py reads every other module for private
imports, attributes and overrides: tests/private_uses.py). Each hook relies on internals a minor release may
change without notice, so tests/compat_check.py runs each one on the installed versions and raises if one no
longer takes effect (tests/test_compat.py runs it; docs/development.md says what to do when it fails). Importing
this module changes nothing in Keras or TensorFlow: the hooks are mixins, functions, and two patches, each
active only inside a `with` block.

The hooks and the private symbols each relies on:
- `ClipsSummedGradients`: optimizer mixin, global-norm clipping of the gradient summed over replicas: overrides
  `Optimizer._clip_gradients` and `Optimizer._all_reduce_sum_gradients` and calls Keras' own through `super()`
  (the latter returns `(gradient, variable)` pairs).
- `variable_index`: a variable's slot in the optimizer's per-variable lists: `Optimizer._get_variable_index`.
- `TensorBoard`: epoch metrics and each epoch's last step written whatever the batch-level summary condition:
  overrides `TensorBoard._log_epoch_metrics`, writes with `TensorBoard._train_writer`, and names and numbers the
  step as Keras' own batch summaries (`batch_<metric>`); batches are counted on from the optimizer's steps, so a
  resumed `fit` goes on numbering where the run stopped: sets `TensorBoard._global_train_batch`; each step's
  summaries are flushed when its batch ends (with `TensorBoard._train_writer`).
- `accept_raw_inputs` / `keep_input_dtype`: a layer's call gets its inputs as given: sets
  `Layer._convert_input_args` and `Layer._allow_non_tensor_positional_args`.
- `RestoresCompile`: `.keras` loading compiles a model whose `compile` is overridden: Keras calls
  `Model.compile_from_config` only for models that do not override `compile`.
- `keras_20585_workaround` (and `WorksAroundKeras20585`, the models' mixin that enters it): keras-team/keras#20585,
  `fit` under more than one replica: replaces, inside its block, `TensorFlowTrainer._maybe_symbolic_build` and the
  module function `reduce_per_replica` of `keras.src.backend.tensorflow.trainer` (which the train and test
  functions look up when they are traced); calls that module's `_collective_all_reduce_multi_worker`, reads
  `TensorFlowTrainer._distribute_strategy`, and iterates Keras' `TFEpochIterator` as its own
  `_maybe_symbolic_build` does (`(_, _, steps)` triples, `next(steps)` a distributed batch).
- `BuildsBeforeTracing`: model mixin, `fit` and `evaluate` build the optimizer, the compiled metrics and loss
  before Keras traces the step, as Keras does itself under a strategy: calls `Trainer._symbolic_build` (with a
  dataset's element spec as the batch) where `TensorFlowTrainer._distribute_strategy` is None.
- `write_archive`: `ExportArchive.write_out` with each endpoint traced once, not twice: `tf.saved_model.save`
  traces a `tf.function` again inside its save context, whose variable policy is part of the function cache's
  key (tensorflow/tensorflow#56370), after Keras traced it outside that context. Replaces each endpoint given an
  input signature (the names in `ExportArchive._endpoint_signatures`) on `ExportArchive._tf_trackable` by its
  concrete function, which `save` writes as it is.
- `saved_object`: a bare SavedModel object: `tf.__internal__.tracking.AutoTrackable`.
- `dataset_graph`: the graph of a `tf.data.Dataset`, for tests: `Dataset._as_serialized_graph`.
- `fast_wordpiece_model`: the flatbuffer `tf_text.FastWordpieceTokenizer` builds from a vocabulary, built once
  and passed as its `model_buffer`: tf.text's builder
  `tensorflow_text.core.pybinds.pywrap_fast_wordpiece_tokenizer_model_builder`.
- `onednn_enabled`: whether TensorFlow runs oneDNN kernels, for tests:
  `tensorflow.python.util._pywrap_util_port.IsMklEnabled`.
- `draws_deferred`: in its block, the TF backend's `Variable._initialize_with_initializer` makes zeros of a seeded
  `keras.src.initializers.random_initializers.RandomInitializer`; `Variable._direct_assign` records load writes.

Outside this module, one private layout: bert_keras/serving/tfserving/c_api_loader.py compiles `c_api_predict.c`
against the TensorFlow wheel's C headers (`tf.sysconfig`) and `libtensorflow_cc.so.2` (where the wheel keeps the
C API), loads tf.text's op libraries from `tensorflow_text/python/ops/_*.so`, and parses the protos of
`tensorflow.core`; when that build fails, `bert-keras export` reports its C++ loader check as skipped."""

import contextlib
import threading

import keras
import numpy as np
import tensorflow as tf

# The first Keras release with the upstream fix of keras-team/keras#20585 (None: not
# fixed yet, work around it on every Keras 3). tests/training/test_distribute.py runs
# unpatched Keras on two workers and fails once the bug is gone: then set this to that
# Keras version.
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
    with `update_freq` 33 logged no held-out curve, and its logs ended at step 1,980.
    Batches are numbered from the optimizer's steps (Keras: from 1 in each `fit`), so the
    `fit` of a resumed run logs each step under the number an uninterrupted run gives it.
    A step's summaries are on disk when its batch ends (Keras: when the next batch begins),
    so a backup taken after this callback (`training.backup.StepBackup`) never holds a step
    whose logs a kill then loses."""

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        optimizer = self.model.optimizer
        self._global_train_batch = int(optimizer.iterations.numpy()) * (optimizer.gradient_accumulation_steps or 1)
        self.batch_logs = None

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        self.batch_logs = logs
        if self.update_freq != "epoch":
            self._train_writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        step = self._global_train_batch
        if self.update_freq != "epoch" and isinstance(self.batch_logs, dict) and step % self.update_freq:
            # The epoch's last step, unless Keras' batch summaries wrote it.
            with tf.summary.record_if(True), self._train_writer.as_default():
                for name, value in self.batch_logs.items():
                    tf.summary.scalar(f"batch_{name}", value, step=step)
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


class BuildsBeforeTracing:
    """Mixin for a `keras.Model` (listed before it): `fit` and `evaluate` build what the
    first step would create, before Keras traces it.

    Keras' TensorFlow trainer builds the compiled metrics, loss and optimizer before the
    first step only for a model compiled in a strategy's scope (`_maybe_symbolic_build`
    returns at once otherwise). Built inside the traced step instead, their variables make
    `tf.function` trace the step twice: once with the variables' initialisers lifted out,
    once without. Built here from the shapes of the data (a dataset's element spec; other
    data builds the optimizer alone), the step is traced once: a 1-step fine-tuning of the
    2-layer test model took 8-11 CPU-seconds, 5.5-7 with this.
    """

    def fit(self, *args, **kwargs):
        self._build_before_tracing(args[0] if args else kwargs.get("x"))
        return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self._build_before_tracing(args[0] if args else kwargs.get("x"))
        return super().evaluate(*args, **kwargs)

    def _build_before_tracing(self, data):
        if getattr(self, "_distribute_strategy", None) is not None or self.optimizer is None:
            return  # Keras builds under a strategy; an uncompiled model has nothing to build
        if isinstance(data, tf.data.Dataset) and all(
            isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(data.element_spec)
        ):
            self._symbolic_build(data_batch=data.element_spec)
        elif not self.optimizer.built and self.built:
            self.optimizer.build(self.trainable_variables)


def builds_from_fit_data(model):
    """Whether Keras' `fit` builds `model` from a batch it takes from the training data: a
    model made in a strategy's scope. Keras then starts the data anew, and a second
    iterator of one dataset shuffles anew (how far the first one's prefetching ran decides
    how), so such a model is built before `fit` (`needs_symbolic_build`), on other data."""
    return getattr(model, "_distribute_strategy", None) is not None


def needs_symbolic_build(model):
    """Whether Keras' build before `fit` or `evaluate` has anything to build: the model's
    layers, its compiled metrics or loss (as `Trainer._symbolic_build` decides)."""
    compiled = (getattr(model, "_compile_metrics", None), getattr(model, "_compile_loss", None))
    return not all(layer.built for layer in model._flatten_layers()) or any(
        part is not None and not part.built for part in compiled
    )


def keras_version():
    return tuple(int(part) for part in keras.version().split(".")[:2])


def keras_20585_unfixed():
    """Whether the installed Keras is one keras-team/keras#20585 affects."""
    version = keras_version()
    return version >= (3, 0) and (KERAS_20585_FIXED_IN is None or version < KERAS_20585_FIXED_IN)


def keras_20585_affects(strategy):
    """Whether `fit` under `strategy` meets keras-team/keras#20585: more than one replica
    in sync (so that Keras' build reduces a per-replica batch) on an unfixed Keras. One
    device, or a mirrored strategy over one device, feeds plain batches and is unaffected."""
    return strategy.num_replicas_in_sync > 1 and keras_20585_unfixed()


@contextlib.contextmanager
def keras_20585_workaround(strategy):
    """`fit` (and its validation) under `strategy` works around keras-team/keras#20585
    inside this block; where the bug does not bite (`keras_20585_affects`) nothing changes.

    Keras 3's TensorFlow trainer breaks on more than one replica in two places:
    1. `_maybe_symbolic_build` takes one distributed batch and `strategy.reduce`s it
       ("MEAN") to a plain batch. On a multi-worker strategy the collective reduce cannot
       convert the `PerReplica` input ("Attempt to convert a value (PerReplica...) ... to
       a Tensor"); on a mirrored strategy over several devices it turns integer token ids
       into floats, so a model not yet built fails to build.
    2. `reduce_per_replica` reduces the step's scalar metrics with
       `strategy.reduce("MEAN", v, axis=0)`, which fails on scalars (multi-worker only).
    The fix: build from the first local replica's batch (only its shapes and dtypes
    matter), and on multi-worker strategies average scalars over replicas with
    `axis=None`; everything else goes to Keras' own code. Keras' own functions are back
    when the block ends; train and test steps traced inside it keep the fix. Nested
    blocks leave the patch to the outermost.
    """
    if not keras_20585_affects(strategy) or keras_20585_patched():
        yield
        return
    trainer = _keras_trainer()
    keras_build, keras_reduce = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
    trainer.TensorFlowTrainer._maybe_symbolic_build = _build_from_a_local_batch(keras_build)
    trainer.reduce_per_replica = _reduce_scalars_over_workers(keras_reduce, trainer._collective_all_reduce_multi_worker)
    try:
        yield
    finally:
        trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica = keras_build, keras_reduce


class WorksAroundKeras20585:
    """Mixin for a `keras.Model` (listed before it): its own `fit`, `evaluate` and `predict`
    run inside `keras_20585_workaround(self.distribute_strategy)`, so a script that builds
    the model in a strategy's scope and calls `fit` needs no block of its own."""

    def fit(self, *args, **kwargs):
        with keras_20585_workaround(self.distribute_strategy):
            return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        with keras_20585_workaround(self.distribute_strategy):
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        with keras_20585_workaround(self.distribute_strategy):
            return super().predict(*args, **kwargs)


def _keras_trainer():
    """Keras' TensorFlow trainer module, or a clear error where a patched name is gone."""
    from keras.src.backend.tensorflow import trainer

    owners = {"_maybe_symbolic_build": trainer.TensorFlowTrainer, "reduce_per_replica": trainer}
    owners["_collective_all_reduce_multi_worker"] = trainer
    missing = [name for name, owner in owners.items() if not hasattr(owner, name)]
    if missing:
        raise RuntimeError(
            f"Keras {keras.version()} no longer has {missing}: bert_keras.compat cannot work around "
            "keras-team/keras#20585; check whether Keras fixed it and update KERAS_20585_FIXED_IN"
        )
    return trainer


def keras_20585_patched():
    """Whether Keras' trainer is patched now (a `keras_20585_workaround` block is running)."""
    from keras.src.backend.tensorflow import trainer

    functions = (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica)
    return any(getattr(function, "works_around_keras_20585", False) for function in functions)


def _build_from_a_local_batch(keras_build):
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if iterator is not None and strategy is not None and not needs_symbolic_build(self):
            iterator = None  # nothing to build: `fit`'s data is not touched (see `needs_symbolic_build`)
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

    _maybe_symbolic_build.works_around_keras_20585 = True
    return _maybe_symbolic_build


def _reduce_scalars_over_workers(keras_reduce, multi_worker):
    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and multi_worker(strategy):
            return tf.nest.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)
        return keras_reduce(values, strategy, reduction)

    reduce_per_replica.works_around_keras_20585 = True
    return reduce_per_replica


def write_archive(archive, path):
    """`archive.write_out(path)`, quietly, each endpoint that has an input signature traced
    once: saved as its concrete function (loading gives a callable of the same arguments)."""
    for name in archive._endpoint_signatures:
        setattr(archive._tf_trackable, name, getattr(archive._tf_trackable, name).get_concrete_function())
    archive.write_out(str(path), verbose=False)


def saved_object():
    """An empty object whose attributes `tf.saved_model.save` tracks: functions, variables
    and plain lists, with no attributes of its own (`tf.Module` has read-only `variables`)."""
    return tf.__internal__.tracking.AutoTrackable()


def dataset_graph(dataset):
    """The `tf.compat.v1.GraphDef` that runs `dataset` (its ops and functions)."""
    return tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())


def fast_wordpiece_model(
    vocabulary, max_bytes_per_word, suffix_indicator, unknown_token, no_pretokenization, detokenize
):
    """The model `tf_text.FastWordpieceTokenizer(vocab=vocabulary, ...)` builds, as bytes."""
    from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder as builder

    return builder.build_fast_wordpiece_model(
        vocabulary, max_bytes_per_word, suffix_indicator, unknown_token, no_pretokenization, detokenize
    )


def onednn_enabled():
    """Whether this TensorFlow build runs oneDNN kernels (off with TF_ENABLE_ONEDNN_OPTS=0)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


_one_deferring_block = threading.Lock()


@contextlib.contextmanager
def draws_deferred():
    """A block in which a model built to be loaded draws none of the random values the load overwrites (BERT-base:
    110M, 2.7 of its load's 4.5 CPU-seconds). A variable of an integer-seeded random initializer (Keras seeds each as
    it is made: every call draws the same) starts as zeros; on leaving, one nothing assigned and still zero is drawn,
    as it would have been. One block defers at a time in a process (a nested one, or another thread's meanwhile,
    defers nothing); a block left by an exception draws nothing."""
    from keras.src.backend.tensorflow.core import Variable
    from keras.src.initializers.random_initializers import RandomInitializer

    if not _one_deferring_block.acquire(blocking=False):
        yield
        return
    keras_initialize, keras_assign = Variable._initialize_with_initializer, Variable._direct_assign
    owner, pending, assigned = threading.get_ident(), [], set()

    def initialize(variable, initializer):
        seeded = isinstance(initializer, RandomInitializer) and isinstance(initializer.seed, int)
        if seeded and threading.get_ident() == owner:
            pending.append((variable, initializer))
            initializer = keras.initializers.Zeros()
        keras_initialize(variable, initializer)

    def direct_assign(variable, value):
        assigned.add(id(variable))
        keras_assign(variable, value)

    Variable._initialize_with_initializer, Variable._direct_assign = initialize, direct_assign
    try:
        yield
    finally:
        Variable._initialize_with_initializer, Variable._direct_assign = keras_initialize, keras_assign
        _one_deferring_block.release()
    for variable, initializer in pending:
        if id(variable) not in assigned and not np.any(keras.ops.convert_to_numpy(variable.value)):
            variable.assign(initializer(variable.shape, dtype=variable.dtype))

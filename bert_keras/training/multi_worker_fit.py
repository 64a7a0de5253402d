"""Workaround for keras-team/keras#20585: `model.fit` under MultiWorkerMirroredStrategy.

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
`axis=None`; everything else goes to Keras' own code. `apply()` is called by
`resolve_strategy` for every strategy but "default".

`tests/test_distribute.py` runs unpatched Keras on two workers and fails once the
upstream bug is gone: then set `KERAS_20585_FIXED_IN` to that Keras version.
"""

import keras
import tensorflow as tf

# The first Keras release with the upstream fix (None: not fixed yet, patch every Keras 3).
KERAS_20585_FIXED_IN = None


def keras_version():
    return tuple(int(part) for part in keras.version().split(".")[:2])


def needed():
    """Whether the installed Keras is one the bug affects."""
    version = keras_version()
    return version >= (3, 0) and (KERAS_20585_FIXED_IN is None or version < KERAS_20585_FIXED_IN)


def apply():
    """Patches Keras' TensorFlow trainer in this process (idempotent; a no-op where not needed)."""
    if not needed():
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
            f"Keras {keras.version()} no longer has {missing}: bert_keras.training.multi_worker_fit cannot patch "
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

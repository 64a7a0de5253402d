"""`tf.distribute` for every pipeline: one script from one CPU to many GPUs, hosts or TPUs.

- `resolve_strategy` turns `--strategy` into a strategy; build models and optimizers
  in its `scope()`. Keras' trainer breaks on more than one replica (keras-team/keras#20585):
  the library's models enter `compat.keras_20585_workaround` in their own `fit`, `evaluate`
  and `predict`; another model's `fit` needs that block around it.
- `distribute_dataset` feeds `fit` through `distribute_datasets_from_function`: each
  input pipeline (one per worker or TPU host) builds its own dataset of per-replica
  batches, global batch / replicas each, reading its share of the files
  (`shard_files`). `split_global_batches` does the same for in-memory data batched
  at the global size.
- TPUs compile one program per input shape: `needs_static_shapes` says when every
  batch must have the same, fully defined shape (drop_remainder, fixed padding).
- Saving reads distributed variables collectively, so every worker saves, but only the
  chief writes where asked: `chief_path` gives the other workers a temporary path, and
  `backup_and_restore` a temporary backup seeded from the chief's.
"""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import tensorflow as tf

from bert_keras.models.dtype import warn_if_slow_bfloat16
from bert_keras.training.backup import StepBackup

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker", "tpu")


def resolve_strategy(name="default", tpu=None, devices=None):
    """A `tf.distribute.Strategy` by name.

    - default: the current (no-op) strategy, one device.
    - one_device: everything on `devices[0]` (default: the first GPU, else the CPU).
    - mirrored: synchronous data parallelism over `devices` (default: all local GPUs,
      else the CPU).
    - multi_worker: MultiWorkerMirroredStrategy over the cluster in `TF_CONFIG` (every
      local GPU of every worker).
    - tpu: TPUStrategy on the TPU named by `tpu` ("local", a name or a grpc:// address;
      none: from the environment, as on a Cloud TPU VM).

    Resolving changes nothing in Keras: the library's models work around
    keras-team/keras#20585 in their own `fit` (`compat.WorksAroundKeras20585`).
    Resolve it before other TensorFlow work: multi-worker collectives are configured
    when TensorFlow starts its runtime.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {list(STRATEGIES)}")
    if devices and name not in ("one_device", "mirrored"):
        raise ValueError(f"devices apply to one_device and mirrored, not to {name!r}")
    if tpu and name != "tpu":
        raise ValueError(f"a TPU address applies to strategy 'tpu', not to {name!r}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        if devices and len(devices) > 1:
            raise ValueError(f"one_device takes one device, got {list(devices)}")
        if devices:
            device = devices[0]
        else:
            device = "/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(list(devices) if devices else None)
    if name == "multi_worker":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _check_tf_config():
    """A clear error for a missing or malformed TF_CONFIG (TensorFlow would just hang or run alone)."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise ValueError(
            "strategy 'multi_worker' needs TF_CONFIG, e.g. "
            '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}'
        )
    try:
        config = json.loads(text)
        workers = config["cluster"]["worker"]
        task = config["task"]
        index = int(task["index"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"TF_CONFIG must hold cluster.worker and task.type/index, got {text!r}") from error
    if task.get("type") == "worker" and not 0 <= index < len(workers):
        raise ValueError(f"TF_CONFIG task index {index} is not one of the {len(workers)} workers")


def mixed_precision_policy():
    """'mixed_float16' on GPUs (float16 tensor cores, with loss scaling), else
    'mixed_bfloat16' (TPUs and CPUs: same range as float32, no loss scaling), with a
    warning on a CPU without bfloat16 units, where it is slower than float32."""
    if tf.config.list_physical_devices("GPU"):
        return "mixed_float16"
    if not tf.config.list_logical_devices("TPU"):
        warn_if_slow_bfloat16("--mixed-precision (mixed_bfloat16 on CPU)")
    return "mixed_bfloat16"


def needs_static_shapes(strategy):
    """Whether every batch must have one fully defined shape (TPUs)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def check_global_batch(strategy, global_batch_size):
    """The per-replica batch size, or a clear error when replicas do not divide the batch."""
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            f"the global batch size {global_batch_size} is not divisible by the {replicas} replicas in sync"
        )
    return global_batch_size // replicas


def distribute_dataset(strategy, dataset_fn, global_batch_size):
    """`dataset_fn(per_replica_batch_size, input_context)` -> a dataset of per-replica
    batches, distributed by `strategy` for `fit` (the dataset itself under the default
    strategy)."""
    per_replica = check_global_batch(strategy, global_batch_size)
    return strategy.distribute_datasets_from_function(lambda context: dataset_fn(per_replica, context))


def shard_files(files, input_context):
    """This input pipeline's share of `files` (every n-th, so shards stay balanced)."""
    count, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    if count == 1:
        return list(files)
    if len(files) < count:
        raise ValueError(
            f"{count} input pipelines (workers) shard data by file but there are only {len(files)} "
            f"file(s): write at least {count} shards"
        )
    return list(files)[index::count]


def input_pipelines(strategy):
    """How many input pipelines `distribute_dataset` builds: one per worker under
    multi_worker (chief included), else one."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def check_shares(files, num_input_pipelines, is_empty, what):
    """A clear error when any input pipeline's share of `files` (as `shard_files` deals
    them) is all empty (`is_empty(path)`). Every worker checks every share, so all stop
    with the same message before training, instead of one worker failing on its first
    batch while the others wait in a collective."""
    for index in range(num_input_pipelines):
        share = shard_files(files, tf.distribute.InputContext(num_input_pipelines, index, num_input_pipelines))
        if all(is_empty(path) for path in share):
            who = f"worker {index} of {num_input_pipelines}" if num_input_pipelines > 1 else "training"
            raise ValueError(
                f"{who} would get no data: its share of {what} ({', '.join(map(str, share))}) is empty"
                + (
                    "; use fewer workers or more shards with data in each (create-pretraining-data's manifest "
                    "lists empty shards)"
                    if num_input_pipelines > 1
                    else ""
                )
            )


def local_replicas(input_context):
    """Replicas fed by one input pipeline (a worker's devices)."""
    return input_context.num_replicas_in_sync // input_context.num_input_pipelines


def split_global_batches(dataset, global_batch_size, input_context, seq_length=None):
    """Dense global batches -> this input pipeline's per-replica batches, in replica order.

    Batches smaller than `global_batch_size` (an epoch's remainder) are dropped, so
    replicas always get equal shares. With `seq_length`, every shape is fully defined
    (TPUs): `[batch, seq]` tensors of dynamic length are zero-padded to it, which is
    the inputs' own padding (`input_mask` 0, `[PAD]` id 0); give labels a fixed length
    upstream (a preprocessor with `seq_length`).
    """
    local = local_replicas(input_context)
    per_replica = global_batch_size // input_context.num_replicas_in_sync
    start = input_context.input_pipeline_id * local * per_replica

    def pieces(tensor):
        tensor = tensor[start : start + local * per_replica]
        shape = tensor.shape[1:]
        if seq_length is not None and tensor.shape.rank >= 2 and tensor.shape[1] is None:
            padding = [[0, 0], [0, seq_length - tf.shape(tensor)[1]]] + [[0, 0]] * (tensor.shape.rank - 2)
            tensor = tf.pad(tensor, padding)
            shape = [seq_length, *shape[1:]]
        split = tf.reshape(tensor, tf.concat([[local, per_replica], tf.shape(tensor)[1:]], axis=0))
        return tf.ensure_shape(split, [local, per_replica, *shape])

    def split(*batch):
        batch = batch if len(batch) > 1 else batch[0]
        return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(pieces, batch))

    full = dataset.filter(lambda *batch: tf.shape(tf.nest.flatten(batch)[0])[0] == global_batch_size)
    return full.flat_map(split)


def is_chief(strategy):
    """Whether this worker writes checkpoints and exports (the only worker, the `chief`
    task, or worker 0 of a cluster without one)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return True
    if "chief" in resolver.cluster_spec().as_dict():
        return resolver.task_type == "chief"
    return resolver.task_type in ("worker", "chief") and resolver.task_id == 0


@contextlib.contextmanager
def chief_path(path, strategy):
    """Where this worker writes `path`: `path` on the chief, a temporary path with the
    same name elsewhere (removed on exit). Every worker must save, since reading some
    distributed variables is a collective op."""
    path = Path(path)
    if is_chief(strategy):
        yield path
        return
    folder = Path(tempfile.mkdtemp(prefix=f"worker{strategy.cluster_resolver.task_id}_"))
    try:
        yield folder / path.name
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def backup_and_restore(backup_dir, strategy, **kwargs):
    """A `backup.StepBackup` for this worker, in a `with` block.

    The chief backs up to `backup_dir`. The other workers restore from a copy of the
    chief's backup (the folder must be shared, e.g. NFS or GCS mounted on every host),
    then write their backups to a temporary folder removed when the block ends (also on
    an error), so every worker resumes from the same step.
    """
    if is_chief(strategy):
        yield StepBackup(backup_dir, **kwargs)
        return
    folder = Path(tempfile.mkdtemp(prefix=f"worker{strategy.cluster_resolver.task_id}_backup_"))
    try:
        if Path(backup_dir).is_dir():
            shutil.copytree(backup_dir, folder, dirs_exist_ok=True)
        yield StepBackup(folder, **kwargs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

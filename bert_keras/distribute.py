"""One place that turns a `--strategy` name into a `tf.distribute` strategy."""

import tensorflow as tf

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker", "tpu")


def resolve_strategy(name="default", tpu=None, devices=None):
    """A `tf.distribute.Strategy` by name.

    - default: the current (no-op) strategy, one device.
    - one_device: everything on `devices[0]` (default: the first GPU, else the CPU).
    - mirrored: synchronous data parallelism over `devices` (default: all local GPUs).
    - multi_worker: MultiWorkerMirroredStrategy; the cluster comes from `TF_CONFIG`.
    - tpu: TPUStrategy on the TPU named by `tpu` ("local", a name or a grpc:// address).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        if devices:
            device = devices[0]
        else:
            device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices or None)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown strategy {name!r}; choose one of {list(STRATEGIES)}")

"""tf.distribute: strategies, per-replica data, equivalence with one device, multi-worker
fit (keras-team/keras#20585), chief-only writes and resume, TPU readiness, mixed precision."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, VOCAB_FILE, require
from distribute_runs import GLOBAL_BATCH, PREDICTIONS, SEQ_LENGTH, load_weights
from harness import one_layer_bert_config

from bert_keras.data import pretraining_shards
from bert_keras.data.example_encoder import serialize_instance
from bert_keras.data.instances import Instance
from bert_keras.data.shard_manifest import manifest_path
from bert_keras.data.tfrecords import pretraining_dataset, shard_names
from bert_keras.training import distribute

ROOT = Path(__file__).resolve().parents[2]
RUNS = Path(__file__).resolve().parent / "distribute_runs.py"
SAMPLE = DATA / "pretraining" / "sample_text.txt"
SYNTHETIC_VOCAB = 100


def synthetic_records(folder, shards=2, per_shard=48, seed=0):
    """Original-format TFRecords of random instances with 1..PREDICTIONS masked tokens,
    so replicas see different numbers of predictions."""
    rng = random.Random(seed)
    files = []
    for shard in range(shards):
        path = Path(folder) / f"synthetic-{shard}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for _ in range(per_shard):
                length = rng.randint(10, SEQ_LENGTH)
                ids = [1] + [rng.randint(4, SYNTHETIC_VOCAB - 1) for _ in range(length - 2)] + [2]
                split = rng.randint(2, length - 2)
                positions = sorted(rng.sample(range(1, length - 1), rng.randint(1, PREDICTIONS)))
                labels = [ids[p] for p in positions]
                for p in positions:
                    ids[p] = 3
                segments = [0] * split + [1] * (length - split)
                instance = Instance(ids, segments, positions, labels, rng.random() < 0.5)
                writer.write(serialize_instance(instance, SEQ_LENGTH, PREDICTIONS))
        files.append(str(path))
    return files


def run(args, timeout=600, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, str(RUNS), *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def max_difference(a, b):
    assert len(a) == len(b)
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


@pytest.mark.slow  # trains in TensorFlow subprocesses
def test_mirrored_over_two_cpus_matches_one_device(tmp_path):
    sentences = [line.strip() for line in require(SAMPLE).read_text().splitlines() if line.strip()]
    inputs = {
        "files": synthetic_records(tmp_path),
        "vocab_size": SYNTHETIC_VOCAB,
        "vocab": str(require(VOCAB_FILE)),
        "sentences": (sentences * 3)[: 10 * GLOBAL_BATCH],
    }
    (tmp_path / "inputs.json").write_text(json.dumps(inputs))
    result = run(["mirrored", tmp_path])
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "mirrored.json").read_text())
    assert report["replicas"] == 2
    assert report["patched_after"] is False  # the recipes' keras#20585 workaround undid itself
    weights = load_weights(tmp_path / "mirrored.npz")
    for task in ("pretrain", "packed", "finetune", "embed"):
        one_device, mirrored = weights[f"{task}_one_device"], weights[f"{task}_mirrored"]
        assert max_difference(one_device, weights[f"{task}_initial"]) > 1e-3  # it trained
        assert max_difference(one_device, mirrored) < 1e-5, task


def assert_logged_as_uninterrupted(resumed, whole):
    """The resumed run's TensorBoard scalars (log, tag, step, value) are the uninterrupted
    run's: each step once, values within float noise (rates aside)."""
    logged = [tuple(entry[:3]) for entry in resumed]
    assert len(set(logged)) == len(logged) and sorted(logged) == sorted(tuple(e[:3]) for e in whole)
    values = {tuple(entry[:3]): entry[3] for entry in whole}
    for entry in resumed:
        if "steps_per_second" not in entry[1]:
            assert entry[3] == pytest.approx(values[tuple(entry[:3])], rel=1e-4, abs=1e-5), entry


@pytest.mark.slow
def test_mirrored_finetuning_killed_and_resumed_matches_an_uninterrupted_run(tmp_path):
    """`recipes.finetune` mirrored over 2 logical CPUs, killed after step 5 and run again:
    the weights (float noise), the epochs' metrics and the logged steps of the
    uninterrupted run, no step logged twice."""
    sentences = [line.strip() for line in require(SAMPLE).read_text().splitlines() if line.strip()]
    (tmp_path / "inputs.json").write_text(json.dumps({"vocab": str(require(VOCAB_FILE)), "sentences": sentences}))
    result = run(["resume", tmp_path])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "resuming after step 4 of 6" in result.stdout
    report = json.loads((tmp_path / "resume.json").read_text())
    whole, resumed = report["whole"], report["resumed"]
    assert report["replicas"] == 2 and resumed["epochs"] == [1]
    assert [e["accuracy"] for e in resumed["evaluations"]] == [e["accuracy"] for e in whole["evaluations"]]
    weights = load_weights(tmp_path / "resume.npz")
    assert max_difference(weights["resumed"], weights["whole"]) < 1e-5
    assert_logged_as_uninterrupted(resumed["scalars"], whole["scalars"])


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tiny_pretrainer(seed):
    import keras
    from distribute_runs import tiny_config

    from bert_keras import BertEncoder
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training.optimization import create_optimizer

    keras.utils.set_random_seed(seed)
    model = BertPretrainer(BertEncoder(tiny_config(SYNTHETIC_VOCAB)))
    model.compile(optimizer=create_optimizer(1e-3, 100, 2))  # as distribute_runs.pretrain
    return model


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """Two MultiWorkerMirrored workers on 127.0.0.1 pre-train from the same weights,
    each reading one of two TFRecord files (global batch 8 = 4 per worker)."""
    from distribute_runs import save_weights

    folder = tmp_path_factory.mktemp("two_workers")
    files = synthetic_records(folder)
    (folder / "inputs.json").write_text(json.dumps({"files": files, "vocab_size": SYNTHETIC_VOCAB}))
    initial = tiny_pretrainer(seed=2).get_weights()
    save_weights(folder / "initial.npz", {"initial": initial})
    ports = ",".join(map(str, free_ports(2)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    workers = [
        subprocess.Popen(
            [sys.executable, str(RUNS), "worker", str(i), ports, str(folder), str(folder)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        logs = [worker.communicate(timeout=600)[0] for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    for worker, log in zip(workers, logs):
        assert worker.returncode == 0, log[-4000:]
    return {
        "files": files,
        "initial": initial,
        "reports": [json.loads((folder / f"worker{i}.json").read_text()) for i in range(2)],
        "weights": [load_weights(folder / f"worker{i}.npz")["final"] for i in range(2)],
    }


@pytest.mark.slow  # trains in TensorFlow subprocesses
def test_keras_20585_still_needs_the_workaround(two_workers):
    """Fails once unpatched Keras can `fit` under MultiWorkerMirroredStrategy: then set
    `bert_keras.compat.KERAS_20585_FIXED_IN` to the installed Keras version."""
    import keras

    for report in two_workers["reports"]:
        error = report["upstream_error"]
        assert error is not None, (
            f"keras-team/keras#20585 is fixed in Keras {keras.version()}: set "
            "bert_keras.compat.KERAS_20585_FIXED_IN and drop the workaround"
        )
        assert "PerReplica" in error, error


@pytest.mark.slow  # trains in TensorFlow subprocesses
def test_two_workers_match_one_process(two_workers):
    import keras

    assert [r["replicas"] for r in two_workers["reports"]] == [2, 2]
    assert [r["patched_after"] for r in two_workers["reports"]] == [False, False]
    assert [r["chief"] for r in two_workers["reports"]] == [True, False]
    worker0, worker1 = two_workers["weights"]
    assert max_difference(worker0, worker1) == 0.0  # replicas stay identical
    assert max_difference(worker0, two_workers["initial"]) > 1e-3  # it trained

    # One process, one device: global batch i = worker 0's i-th batch (file 0) + worker 1's (file 1).
    model = tiny_pretrainer(seed=3)
    model.set_weights(two_workers["initial"])
    keras.utils.set_random_seed(0)  # as distribute_runs.pretrain, before its dataset
    shards = [
        pretraining_dataset([f], GLOBAL_BATCH // 2, SEQ_LENGTH, PREDICTIONS, seed=0) for f in two_workers["files"]
    ]
    batches = tf.data.Dataset.zip(tuple(shards)).map(
        lambda a, b: tf.nest.map_structure(lambda x, y: tf.concat([x, y], 0), a, b)
    )
    model.fit(batches, steps_per_epoch=10, epochs=1, verbose=0)
    assert max_difference(model.get_weights(), worker0) < 1e-5


# The `pretrain` sub-command's own parser, as in test_pretrain_pipeline.py.
RUN_PRETRAIN = (
    "import argparse, sys; from bert_keras_cli import pretrain; p = argparse.ArgumentParser(); "
    "pretrain.register(p.add_subparsers(dest='command')); a = p.parse_args(sys.argv[1:]); a.func(a)"
)


def start_pretraining_workers(files, output, ports, temp_dirs):
    """Two `bert-keras pretrain --strategy multi_worker` processes (TF_CONFIG on 127.0.0.1)."""
    command = [
        sys.executable,
        "-c",
        RUN_PRETRAIN,
        "pretrain",
        "--config",
        one_layer_bert_config(output.parent),
        "--vocab",
        str(VOCAB_FILE),
        "--data",
        *map(str, files),
        "--output",
        str(output),
        "--strategy",
        "multi_worker",
        "--batch-size",
        "8",
        "--seq-length",
        "64",
        "--max-predictions-per-seq",
        "10",
        "--steps",
        "30",
        "--checkpoint-every",
        "5",
        "--warmup-steps",
        "3",
        "--learning-rate",
        "1e-3",
    ]
    workers = []
    for index in range(2):
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TF_CONFIG": json.dumps(tf_config),
            "TMPDIR": str(temp_dirs[index]),
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        log = open(Path(temp_dirs[index]).parent / f"worker{index}-{ports[0]}.log", "w")
        workers.append((subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    return workers


def completed_epochs(output):
    try:
        return json.loads((output / "checkpoints" / "phase1" / "state.json").read_text())["epoch"]
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_multi_worker_pretraining_resumes_after_a_worker_dies(tmp_path):
    import h5py

    from bert_keras import BertTokenizer

    tokenizer = BertTokenizer(str(require(VOCAB_FILE)))
    # The sample twice, as two input shards: the same text with two seeds.
    recipe = pretraining_shards.Recipe(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=3)
    pretraining_shards.create_pretraining_data(
        [require(SAMPLE)] * 2, tmp_path / "shard", tokenizer, recipe, num_shards=2, progress=False
    )
    files = shard_names(tmp_path / "shard", 2)
    output = tmp_path / "run"
    temp_dirs = [tmp_path / "tmp0", tmp_path / "tmp1"]
    for folder in temp_dirs:
        folder.mkdir()

    workers = start_pretraining_workers(files, output, free_ports(2), temp_dirs)
    deadline = time.time() + 300
    while completed_epochs(output) < 2 and all(w.poll() is None for w, _ in workers) and time.time() < deadline:
        time.sleep(0.2)
    workers[1][0].send_signal(signal.SIGKILL)  # a worker dies mid-run ...
    workers[0][0].send_signal(signal.SIGKILL)  # ... and the job is restarted as a whole
    for worker, log in workers:
        worker.wait()
        log.close()
    done = completed_epochs(output)
    assert 2 <= done < 6, "the workers should have been killed mid-training"
    # The other worker backed up to a temporary folder, not to the shared one.
    stale = sorted(temp_dirs[1].glob("worker1_*"))
    assert any((folder / "latest.weights.h5").exists() for folder in stale), stale

    workers = start_pretraining_workers(files, output, free_ports(2), temp_dirs)
    logs = []
    for worker, log in workers:
        assert worker.wait(timeout=600) == 0, Path(log.name).read_text()[-4000:]
        log.close()
        logs.append(Path(log.name).read_text())
    for log in logs:
        assert f"Epoch {done + 1}/6" in log and f"Epoch {done}/6" not in log, log[-3000:]
    assert f"resuming after step {done * 5} of 30" in logs[0]
    assert completed_epochs(output) == 6
    with h5py.File(output / "checkpoints" / "phase1" / "latest.weights.h5") as weights:
        assert int(np.asarray(weights["optimizer"]["vars"]["0"])) == 30  # no step repeated
    assert (output / "final" / "encoder_tf1" / "bert_model.ckpt.index").exists()
    # Only the chief wrote to the shared output; the other worker's folders are gone.
    assert sorted(temp_dirs[1].glob("worker1_*")) == stale
    assert not any("worker" in path.name for path in output.rglob("*"))


def start_finetuning_workers(out, dying, kill_after, names, temp_dirs):
    """Two `distribute_runs.py resume_worker` processes (TF_CONFIG on 127.0.0.1), each with
    its own TMPDIR; their output goes to `out/workerINDEX-PORT.log`."""
    ports = ",".join(map(str, free_ports(2)))
    workers = []
    for index in range(2):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp_dirs[index]), "TF_CPP_MIN_LOG_LEVEL": "2"}
        log = open(out / f"worker{index}-{ports}.log", "w")
        command = [
            sys.executable,
            str(RUNS),
            "resume_worker",
            str(index),
            ports,
            str(out),
            str(dying),
            str(kill_after),
            *names,
        ]
        workers.append((subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    return workers


@pytest.mark.slow
def test_multi_worker_finetuning_resumes_after_a_worker_dies(tmp_path):
    """`recipes.finetune` on two MultiWorkerMirrored workers: the chief dies (SIGKILL) right
    after its backup of step 4, worker 1 is killed as it waits for it, and both run again
    with the same arguments: they resume after step 4, inside epoch 2, and end with the
    weights (float noise), the epochs' metrics and the logged steps of an uninterrupted
    two-worker run, no step logged twice."""
    sentences = [line.strip() for line in require(SAMPLE).read_text().splitlines() if line.strip()]
    (tmp_path / "inputs.json").write_text(json.dumps({"vocab": str(require(VOCAB_FILE)), "sentences": sentences}))
    temp_dirs = [tmp_path / "tmp0", tmp_path / "tmp1"]
    for folder in temp_dirs:
        folder.mkdir()

    # The uninterrupted run, then the run that loses the chief after step 4.
    workers = start_finetuning_workers(tmp_path, 0, 4, ["whole", "resumed"], temp_dirs)
    (chief, chief_log), (other, other_log) = workers
    try:
        assert chief.wait(timeout=600) == -signal.SIGKILL, Path(chief_log.name).read_text()[-4000:]
    finally:
        other.kill()
        other.wait()
        chief_log.close()
        other_log.close()
    assert (tmp_path / "whole-worker1.json").exists() and not (tmp_path / "resumed-worker1.json").exists()
    stale = sorted(temp_dirs[1].glob("worker1_*"))  # none where worker 1 stopped on its error

    workers = start_finetuning_workers(tmp_path, 0, 0, ["resumed"], temp_dirs)
    logs = []
    for worker, log in workers:
        assert worker.wait(timeout=600) == 0, Path(log.name).read_text()[-4000:]
        log.close()
        logs.append(Path(log.name).read_text())
    assert all("resuming after step 4 of 6" in log for log in logs), logs[0][-3000:]
    whole, resumed = (json.loads((tmp_path / f"{name}-worker0.json").read_text()) for name in ("whole", "resumed"))
    assert whole["replicas"] == 2 and resumed["epochs"] == [1]
    assert [e["accuracy"] for e in resumed["evaluations"]] == [e["accuracy"] for e in whole["evaluations"]]
    final = {
        name: [load_weights(tmp_path / f"{name}-worker{i}.npz")["final"] for i in range(2)]
        for name in ("whole", "resumed")
    }
    assert max_difference(*final["whole"]) == 0.0 and max_difference(*final["resumed"]) == 0.0
    assert max_difference(final["resumed"][0], final["whole"][0]) < 1e-5
    assert_logged_as_uninterrupted(resumed["scalars"], whole["scalars"])
    # Only the chief wrote to the shared folder; worker 1's temporary folders of the second start are gone.
    assert sorted(temp_dirs[1].glob("worker1_*")) == stale
    assert not (tmp_path / "resumed" / "checkpoints").exists() and (tmp_path / "resumed" / "best.keras").exists()


# --- the plumbing, in this process ------------------------------------------------


def test_resolve_strategy_rejects_bad_requests(monkeypatch):
    with pytest.raises(ValueError, match="unknown strategy 'gpus'"):
        distribute.resolve_strategy("gpus")
    with pytest.raises(ValueError, match="devices apply to one_device and mirrored"):
        distribute.resolve_strategy("default", devices=["/cpu:0"])
    with pytest.raises(ValueError, match="TPU address applies to strategy 'tpu'"):
        distribute.resolve_strategy("mirrored", tpu="grpc://10.0.0.2:8470")
    with pytest.raises(ValueError, match="one_device takes one device"):
        distribute.resolve_strategy("one_device", devices=["/cpu:0", "/cpu:1"])
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="'multi_worker' needs TF_CONFIG"):
        distribute.resolve_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    with pytest.raises(ValueError, match="TF_CONFIG must hold cluster.worker"):
        distribute.resolve_strategy("multi_worker")
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}})
    )
    with pytest.raises(ValueError, match="task index 2 is not one of the 2 workers"):
        distribute.resolve_strategy("multi_worker")
    mirrored = distribute.resolve_strategy("mirrored", devices=["/cpu:0"])
    assert distribute.check_global_batch(mirrored, 8) == 8
    with pytest.raises(ValueError, match="global batch size 7 is not divisible by the 2 replicas"):
        distribute.check_global_batch(type("TwoReplicas", (), {"num_replicas_in_sync": 2})(), 7)


def test_keras_20585_workaround_patches_only_where_the_bug_bites_and_undoes_itself():
    """Resolving a strategy patches nothing; the workaround patches Keras' trainer only for
    more than one replica (one device and a mirrored strategy over one device feed plain
    batches, which Keras builds from as it is), only inside its block, also on an error."""
    from bert_keras.compat import keras_20585_patched, keras_20585_unfixed, keras_20585_workaround

    if not keras_20585_unfixed():
        pytest.skip("this Keras has the upstream fix of keras-team/keras#20585")
    one_replica = [
        distribute.resolve_strategy("default"),
        distribute.resolve_strategy("one_device", devices=["/cpu:0"]),
        distribute.resolve_strategy("mirrored", devices=["/cpu:0"]),
    ]
    assert not keras_20585_patched()
    for strategy in one_replica:
        assert strategy.num_replicas_in_sync == 1
        with keras_20585_workaround(strategy):
            assert not keras_20585_patched(), strategy
    two_replicas = type("TwoReplicas", (), {"num_replicas_in_sync": 2})()
    with keras_20585_workaround(two_replicas):
        assert keras_20585_patched()
        with keras_20585_workaround(two_replicas):  # nested: the outermost block undoes it
            pass
        assert keras_20585_patched()
    assert not keras_20585_patched()
    with pytest.raises(RuntimeError, match="fit failed"), keras_20585_workaround(two_replicas):
        raise RuntimeError("fit failed")
    assert not keras_20585_patched()


def test_shard_files_by_input_pipeline():
    files = [f"part-{i}" for i in range(5)]
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    assert distribute.shard_files(files, context) == ["part-1", "part-3"]
    assert distribute.shard_files(files, tf.distribute.InputContext()) == files
    with pytest.raises(ValueError, match="2 input pipelines .* only 1 file"):
        distribute.shard_files(files[:1], context)


def test_split_global_batches_gives_each_replica_its_slice():
    # Worker 1 of 2, with 2 replicas each: global batch 8 -> rows 4:6 and 6:8 of each batch.
    rows = np.arange(20, dtype="int32")
    widths = [5, 3, 4]  # dynamic padding: each global batch has its own length
    batches = [(np.tile(rows[i * 8 : i * 8 + 8, None], (1, widths[i])), rows[i * 8 : i * 8 + 8]) for i in range(3)]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(batches[:2] + [(batches[2][0][:4], batches[2][1][:4])]),  # the last one is partial
        output_signature=(tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)),
    )
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    pieces = list(distribute.split_global_batches(dataset, 8, context).as_numpy_iterator())
    expected = [(batches[i][0][a : a + 2], batches[i][1][a : a + 2]) for i in range(2) for a in (4, 6)]
    assert len(pieces) == len(expected)
    for (x, y), (ex, ey) in zip(pieces, expected):
        np.testing.assert_array_equal(x, ex)
        np.testing.assert_array_equal(y, ey)
    # For TPUs: the dynamic length is padded with zeros and every shape is static.
    static = distribute.split_global_batches(dataset, 8, context, seq_length=6)
    assert static.element_spec[0].shape == (2, 6) and static.element_spec[1].shape == (2,)
    x, _ = next(static.as_numpy_iterator())
    np.testing.assert_array_equal(x, np.pad(batches[0][0][4:6], [[0, 0], [0, 1]]))


def test_only_the_chief_writes_where_asked(tmp_path):
    def worker(task_type, task_id, jobs=("worker",)):
        cluster = tf.train.ClusterSpec({job: [f"host{i}:1" for i in range(2)] for job in jobs})
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, task_type=task_type, task_id=task_id)
        return type("Strategy", (), {"cluster_resolver": resolver})()

    assert distribute.is_chief(tf.distribute.get_strategy())
    assert distribute.is_chief(worker("worker", 0))
    assert not distribute.is_chief(worker("worker", 1))
    assert distribute.is_chief(worker("chief", 0, jobs=("chief", "worker")))
    assert not distribute.is_chief(worker("worker", 0, jobs=("chief", "worker")))
    target = tmp_path / "final"
    with distribute.chief_path(target, worker("worker", 0)) as path:
        assert path == target
    with distribute.chief_path(target, worker("worker", 1)) as path:
        assert path.name == "final" and tmp_path not in path.parents
        path.mkdir()
    assert not path.parent.exists() and not target.exists()
    # A non-chief's backup folder (a copy of the chief's) is removed even when training fails.
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "state.json").write_text('{"step": 1}')
    with pytest.raises(RuntimeError, match="training failed"):
        with distribute.backup_and_restore(backup, worker("worker", 1)) as callback:
            folder = Path(callback.backup_dir)
            assert (folder / "state.json").exists() and tmp_path not in folder.parents
            raise RuntimeError("training failed")
    assert not folder.exists() and (backup / "state.json").exists()


# --- TPU readiness, XLA and mixed precision ------------------------------------------


def fully_defined(spec):
    return all(leaf.shape.is_fully_defined() for leaf in tf.nest.flatten(spec))


@pytest.mark.slow
def test_training_datasets_have_fully_defined_shapes(tmp_path):
    """What a TPU needs: every batch of every training dataset has one static shape."""
    from distribute_runs import tiny_config

    from bert_keras import BertEncoder, BertTokenizer
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.datasets import squad
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.preprocessing import preprocessor_for
    from bert_keras.tasks.token_classifier import BertTokenClassifier

    tokenizer = BertTokenizer(str(require(VOCAB_FILE)))
    pretraining = [
        pretraining_dataset(synthetic_records(tmp_path), 4, SEQ_LENGTH, PREDICTIONS),
        dynamic_masking_dataset([require(SAMPLE)], tokenizer, 4, 64, 10),
    ]
    for dataset in pretraining:
        assert fully_defined(dataset.element_spec), dataset.element_spec

    # Fine-tuning as `finetune.train` feeds a TPU: a fixed-length preprocessor (build_head)
    # and split_global_batches with seq_length; 8 replicas on one host, global batch 16.
    context = tf.distribute.InputContext(num_replicas_in_sync=8)
    encoder = BertEncoder(tiny_config(30522))
    preprocessor = preprocessor_for(encoder, str(VOCAB_FILE), lower_case=True, seq_length=32)
    sentences = np.array(["The rain had only ceased.", "Indeed, it was recorded."] * 8, object)
    classifier = BertClassifier(encoder, 2, preprocessor=preprocessor)
    glue = classifier.preprocessed_dataset(sentences, np.zeros(16, "int32"), batch_size=16)
    tagger = BertTokenClassifier(encoder, 9, preprocessor=preprocessor)
    words = tf.ragged.constant([s.split() for s in sentences])
    conll = tagger.preprocessed_dataset(
        words, tf.ragged.map_flat_values(tf.zeros_like, words, dtype=tf.int32), batch_size=16
    )

    class Windows:  # packed SQuAD windows, trimmed per batch by squad.feature_batches
        input_word_ids = np.ones((16, 32), "int32")
        start_positions = end_positions = np.zeros(16, "int32")

        def __len__(self):
            return 16

        def inputs(self):
            return {
                "input_word_ids": self.input_word_ids,
                "input_mask": self.input_word_ids,
                "input_type_ids": 0 * self.input_word_ids,
            }

    windows = squad.feature_batches(Windows(), 16)
    assert not fully_defined(windows.element_spec)  # dynamic padding, as on GPUs
    for dataset in (glue, conll, windows):
        split = distribute.split_global_batches(dataset, 16, context, seq_length=32)
        assert fully_defined(split.element_spec), split.element_spec
        assert tf.nest.flatten(split.element_spec)[0].shape[0] == 2
        next(iter(split))


@pytest.mark.slow
def test_xla_train_steps_run_with_tokenization_in_tf_data(tmp_path):
    """jit_compile=True train steps (as on TPUs). Raw text is tokenized in tf.data: string
    ops have no XLA kernels (inside the step, TensorFlow 2.21 aborts the process)."""
    from distribute_runs import tiny_config

    from bert_keras import BertEncoder
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.preprocessing import preprocessor_for

    pretrainer = tiny_pretrainer(seed=0)
    pretrainer.compile(optimizer=pretrainer.optimizer, jit_compile=True)
    before = [w.copy() for w in pretrainer.get_weights()]
    pretrainer.fit(
        pretraining_dataset(synthetic_records(tmp_path), 4, SEQ_LENGTH, PREDICTIONS),
        steps_per_epoch=3,
        epochs=1,
        verbose=0,
    )
    assert pretrainer.jit_compile is True
    assert max_difference(pretrainer.get_weights(), before) > 0

    encoder = BertEncoder(tiny_config(30522))
    preprocessor = preprocessor_for(encoder, str(require(VOCAB_FILE)), lower_case=True, seq_length=16)
    classifier = BertClassifier(encoder, 2, preprocessor=preprocessor)
    classifier.compile(jit_compile=True)
    texts, labels = np.array(["a dog.", "the rain had ceased."] * 4, object), np.array([0, 1] * 4, "int32")
    history = classifier.fit(texts, labels, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.fixture
def mixed_precision():
    import keras

    def set_policy(name):
        keras.mixed_precision.set_global_policy(name)

    yield set_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow
def test_mixed_bfloat16_pretraining(tmp_path, mixed_precision):
    import h5py

    from bert_keras.serving.serving_tasks import serving_signature
    from bert_keras.text.preprocessor import BertPreprocessor
    from bert_keras.text.tokenizer import BertTokenizer

    if not tf.config.list_physical_devices("GPU"):
        assert distribute.mixed_precision_policy() == "mixed_bfloat16"  # what --mixed-precision picks here
    mixed_precision("mixed_bfloat16")
    model = tiny_pretrainer(seed=0)
    fixed = pretraining_dataset(synthetic_records(tmp_path), 8, SEQ_LENGTH, PREDICTIONS).take(2).cache().repeat()
    history = model.fit(fixed, steps_per_epoch=10, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0] - 0.5, history
    batch = next(iter(fixed))
    assert model(batch)["mlm_logits"].dtype == tf.bfloat16  # it really computed in bfloat16
    assert {v.dtype for v in model.weights} == {"float32"}
    model.save_weights(tmp_path / "checkpoint.weights.h5")
    with h5py.File(tmp_path / "checkpoint.weights.h5") as stored:
        dtypes = set()
        stored.visititems(lambda name, item: dtypes.add(item.dtype) if isinstance(item, h5py.Dataset) else None)
    assert {np.dtype(d).name for d in dtypes} <= {"float32", "int64"} and np.dtype("float32") in dtypes
    preprocessor = BertPreprocessor(BertTokenizer(str(require(VOCAB_FILE))), seq_length=SEQ_LENGTH)
    signature = serving_signature(model.encoder, preprocessor)
    outputs = signature.from_ids(
        {name: batch[name] for name in ("input_word_ids", "input_mask", "input_type_ids")}, signature.run
    )
    assert {tensor.dtype for tensor in tf.nest.flatten(outputs) if tensor.dtype.is_floating} == {tf.float32}


@pytest.mark.slow
def test_mixed_float16_uses_loss_scaling(tmp_path, mixed_precision):
    import keras

    mixed_precision("mixed_float16")
    model = tiny_pretrainer(seed=0)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    before = [w.copy() for w in model.get_weights()]
    dataset = pretraining_dataset(synthetic_records(tmp_path), 4, SEQ_LENGTH, PREDICTIONS)
    history = model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0).history["loss"]
    assert np.isfinite(history[0])
    assert {v.dtype for v in model.weights} == {"float32"}
    assert max_difference(model.get_weights(), before) > 0


@pytest.mark.slow
def test_multi_worker_with_an_empty_shard_stops_both_workers_clearly(tmp_path, capsys):
    """Issue 23: `create-pretraining-data --num-shards 2` on 3 documents leaves shard 1
    empty (it says so now); two `pretrain --strategy multi_worker` workers on those
    shards both exit with one clear error, before training, with no temporary folder left."""
    from bert_keras import BertTokenizer

    corpus = tmp_path / "three_documents.txt"
    corpus.write_bytes(require(SAMPLE).read_bytes()[:3000])  # 3 documents (2 blank lines)
    assert corpus.read_text().count("\n\n") == 2
    prefix = tmp_path / "shard"
    pretraining_shards.create_pretraining_data([corpus], prefix, BertTokenizer(str(require(VOCAB_FILE))), num_shards=2)
    files = shard_names(prefix, 2)
    manifest = json.loads(Path(manifest_path(prefix)).read_text())
    assert manifest["empty_shards"] == [Path(files[1]).name]
    assert "1 of 2 shard file(s) hold no instances" in capsys.readouterr().err

    ports = free_ports(2)
    workers = []
    for index in range(2):
        temp_dir = tmp_path / f"tmp{index}"
        temp_dir.mkdir()
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TF_CONFIG": json.dumps(tf_config),
            "TMPDIR": str(temp_dir),
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        command = [
            sys.executable,
            "-m",
            "bert_keras_cli.cli",
            "pretrain",
            "--config",
            one_layer_bert_config(tmp_path),
            "--vocab",
            str(VOCAB_FILE),
            "--data",
            *files,
            "--output",
            str(tmp_path / "run"),
            "--strategy",
            "multi_worker",
            "--batch-size",
            "8",
            "--steps",
            "4",
            "--checkpoint-every",
            "2",
        ]
        workers.append(
            subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    started = time.monotonic()
    for worker in workers:
        try:
            _, stderr = worker.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for other in workers:
                other.kill()
            raise
        assert worker.returncode == 2, stderr[-3000:]
        assert f"worker 1 of 2 would get no data: its share of phase1's --data ({files[1]}) is empty" in stderr
        assert "Traceback" not in stderr, stderr[-3000:]
    assert time.monotonic() - started < 300
    assert [list((tmp_path / f"tmp{index}").iterdir()) for index in range(2)] == [[], []]
    assert not (tmp_path / "run" / "checkpoints").exists()

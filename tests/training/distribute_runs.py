"""Training runs for tests/training/test_distribute.py, in processes of their own.

    python distribute_runs.py mirrored OUT                 # 2 logical CPUs: one device vs mirrored
    python distribute_runs.py worker INDEX PORTS DATA OUT  # one MultiWorkerMirrored worker
    python distribute_runs.py resume OUT                   # 2 logical CPUs: fine-tuning killed, resumed
    python distribute_runs.py resume_worker INDEX PORTS OUT DYING KILL_AFTER NAME...  # fine-tuning, one worker

Logical devices and multi-worker collectives must be configured before TensorFlow
starts its runtime, hence the separate processes. Results go to OUT as .npz / .json
files; the test compares them.
"""

import json
import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

STEPS = 10
GLOBAL_BATCH = 8
SEQ_LENGTH, PREDICTIONS = 32, 6
# The fine-tuning run's settings (`bert_keras.recipes.finetune`): STEPS updates, one epoch.
RUN = dict(
    batch_size=GLOBAL_BATCH,
    epochs=1,
    max_train_steps=STEPS,
    learning_rate=1e-3,
    warmup_proportion=0.1,
    weight_decay=0.01,
    max_seq_length=SEQ_LENGTH,
    verbose=0,
)
# The resumed run: 24 examples in global batches of 8, two epochs of 3 steps, backups every
# 2 steps and at epoch ends; killed after step 5, it resumes after step 4, inside epoch 2.
RESUME_EXAMPLES, KILL_AFTER = 24, 5


def no_score(model):
    return {"score": 0.0}


def tiny_config(vocab_size):
    from bert_keras import BertConfig

    return BertConfig.preset(
        "tiny",
        vocab_size=vocab_size,
        num_hidden_layers=1,  # what replicas share does not depend on depth; each layer's trace costs seconds
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def pretrain(strategy, files, initial_weights, vocab_size, packing=0):
    """STEPS of `fit` on the pre-training run's data with its optimizer (rows of up to
    `packing` instances, 4 a replica, with `packing`); final weights."""
    import keras

    from bert_keras import BertEncoder
    from bert_keras.data.pretraining_inputs import PretrainingInputs
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training import distribute
    from bert_keras.training.optimization import create_optimizer

    with strategy.scope():
        model = BertPretrainer(BertEncoder(tiny_config(vocab_size)))
        model.set_weights(initial_weights)
        model.compile(optimizer=create_optimizer(1e-3, 100, 2))
    keras.utils.set_random_seed(0)  # shuffling depends on the global seed too, as in the pipeline
    inputs = PretrainingInputs(None, records=files, seq_length=SEQ_LENGTH, max_predictions_per_seq=PREDICTIONS, seed=0)
    dataset = distribute.distribute_dataset(
        strategy,
        lambda batch, context: inputs.batches(batch, context, packing=packing, packing_window=64),
        GLOBAL_BATCH,
    )
    model.fit(dataset, steps_per_epoch=STEPS, epochs=1, verbose=0)  # no block: the model's own fit enters it
    return model.get_weights()


def finetune(strategy, initial_weights, vocab, sentences, output_dir):
    """STEPS of the fine-tuning run (`bert_keras.recipes.finetune`) on raw sentences; final weights."""
    import numpy as np
    import tensorflow as tf

    from bert_keras import BertEncoder
    from bert_keras.recipes import finetune as finetune_run
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.preprocessing import preprocessor_for

    with strategy.scope():
        encoder = BertEncoder(tiny_config(30522))
        preprocessor = preprocessor_for(encoder, vocab, lower_case=True, seq_length=None, max_seq_length=SEQ_LENGTH)
        model = BertClassifier(encoder, 3, dropout=0.0, preprocessor=preprocessor)
        model.set_weights(initial_weights)
    labels = np.array([len(s) % 3 for s in sentences], "int32")
    batches = tf.data.Dataset.from_tensor_slices((np.array(sentences, object), labels)).batch(GLOBAL_BATCH)
    finetune_run(
        model, batches, STEPS * GLOBAL_BATCH, no_score, "score", strategy=strategy, **RUN, output_dir=output_dir
    )
    return model.get_weights()


def embed(strategy, initial_weights, vocab, sentences, output_dir):
    """STEPS of the fine-tuning run (`bert_keras.recipes.finetune`) for a `BertTextEmbedder` on pairs of
    consecutive sentences (in-batch negatives, gathered across replicas); final weights."""
    import numpy as np
    import tensorflow as tf

    from bert_keras import BertEncoder, BertTextEmbedder
    from bert_keras.recipes import finetune as finetune_run
    from bert_keras.tasks.preprocessing import preprocessor_for

    with strategy.scope():
        encoder = BertEncoder(tiny_config(30522))
        preprocessor = preprocessor_for(encoder, vocab, lower_case=True, seq_length=None, max_seq_length=SEQ_LENGTH)
        model = BertTextEmbedder(encoder, preprocessor=preprocessor)
        model.set_weights(initial_weights)
    columns = (np.array(sentences[:-1], object), np.array(sentences[1:], object))
    batches = tf.data.Dataset.from_tensor_slices((columns,)).batch(GLOBAL_BATCH)
    finetune_run(model, batches, len(sentences) - 1, no_score, "score", strategy=strategy, **RUN, output_dir=output_dir)
    return model.get_weights()


def mirrored(out):
    """Pre-training, fine-tuning and embedder training on one device and mirrored over
    2 logical CPUs."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    from bert_keras import BertEncoder, compat
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.training import distribute

    out = Path(out)
    inputs = json.loads((out / "inputs.json").read_text())
    one_device = distribute.resolve_strategy("default")
    two_cpus = distribute.resolve_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    results = {}

    keras.utils.set_random_seed(1)
    initial = BertPretrainer(BertEncoder(tiny_config(inputs["vocab_size"]))).get_weights()
    results["pretrain_initial"] = initial
    for name, strategy in (("one_device", one_device), ("mirrored", two_cpus)):
        results[f"pretrain_{name}"] = pretrain(strategy, inputs["files"], initial, inputs["vocab_size"])

    for name, strategy in (("one_device", one_device), ("mirrored", two_cpus)):
        results[f"packed_{name}"] = pretrain(
            strategy, inputs["files"], results["pretrain_initial"], inputs["vocab_size"], packing=3
        )
    results["packed_initial"] = results["pretrain_initial"]

    initial = BertClassifier(BertEncoder(tiny_config(30522)), 3, dropout=0.0).get_weights()
    results["finetune_initial"] = initial
    for name, strategy in (("one_device", one_device), ("mirrored", two_cpus)):
        results[f"finetune_{name}"] = finetune(
            strategy, initial, inputs["vocab"], inputs["sentences"], out / f"finetune_{name}"
        )
    from bert_keras import BertTextEmbedder

    initial = BertTextEmbedder(BertEncoder(tiny_config(30522))).get_weights()
    results["embed_initial"] = initial
    for name, strategy in (("one_device", one_device), ("mirrored", two_cpus)):
        results[f"embed_{name}"] = embed(strategy, initial, inputs["vocab"], inputs["sentences"], out / f"embed_{name}")
    save_weights(out / "mirrored.npz", results)
    report = {"replicas": two_cpus.num_replicas_in_sync, "patched_after": compat.keras_20585_patched()}
    (out / "mirrored.json").write_text(json.dumps(report))


class Killed(Exception):
    """Stands for SIGKILL: the process stops at once, whatever it was doing."""


def raise_killed(step):
    """Stands for SIGKILL in this process: the logs written as far as the process had got
    (no writer of the dead run left to write later), then `Killed`."""
    import gc

    import keras

    for callback in gc.get_objects():
        if isinstance(callback, keras.callbacks.TensorBoard):
            callback._close_writers()
    raise Killed(f"killed after step {step}")


def killed_after(step, die=raise_killed):
    """A `StepBackup.on_train_batch_end` that calls `die(step)` right after training `step`."""
    from bert_keras.training.backup import StepBackup

    original = StepBackup.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == step:
            die(step)

    return on_train_batch_end


def scalars(folder):
    """[[file kind, tag, step, value]] of the TensorBoard scalars under `folder`."""
    import tensorflow as tf

    found = []
    for path in sorted(Path(folder).rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                found.append([path.parent.name, value.tag, event.step, float(tf.make_ndarray(value.tensor))])
    return found


def resumable_run(strategy, inputs, folder):
    """The fine-tuning run (`bert_keras.recipes.finetune`, dropout on) of the resume tests into
    `folder`: RESUME_EXAMPLES sentences in global batches of GLOBAL_BATCH, two epochs of 3 steps,
    backups every 2 steps and at epoch ends. Returns the `FinetuningRun`."""
    import keras
    import numpy as np

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.datasets.metrics import accuracy
    from bert_keras.recipes import finetune
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.preprocessing import preprocessor_for
    from bert_keras.training.finetuning import length_grouped_batches

    texts = np.array(inputs["sentences"][:RESUME_EXAMPLES], object)
    labels = np.array([len(text) % 2 for text in texts], "int32")
    config = BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1, max_position_embeddings=64)
    keras.utils.set_random_seed(1)
    initial = BertClassifier(BertEncoder(config), 2).get_weights()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        encoder = BertEncoder(config)
        preprocessor = preprocessor_for(
            encoder, inputs["vocab"], lower_case=True, seq_length=None, max_seq_length=SEQ_LENGTH
        )
        model = BertClassifier(encoder, 2, preprocessor=preprocessor)
        model.set_weights(initial)
    return finetune(
        model,
        lambda: length_grouped_batches((texts, labels), [len(t) for t in texts], GLOBAL_BATCH, True, seed=0),
        len(texts),
        lambda model: {"accuracy": accuracy(labels, model.predict(texts, verbose=0).argmax(-1))},
        "accuracy",
        output_dir=folder,
        strategy=strategy,
        batch_size=GLOBAL_BATCH,
        epochs=2,
        learning_rate=1e-3,
        backup_steps=2,
        verbose=0,
    )


def run_report(run, folder):
    """What the resume tests compare of a `FinetuningRun` written to `folder`."""
    return {"evaluations": run.evaluations[:-1], "epochs": run.history.epoch, "scalars": scalars(Path(folder) / "logs")}


def resume(out):
    """The resumable run mirrored over 2 logical CPUs: uninterrupted, and killed after
    step KILL_AFTER then run again."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    from bert_keras.training import distribute
    from bert_keras.training.backup import StepBackup

    out = Path(out)
    inputs = json.loads((out / "inputs.json").read_text())
    strategy = distribute.resolve_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    whole = resumable_run(strategy, inputs, out / "whole")
    StepBackup.on_train_batch_end, original = killed_after(KILL_AFTER), StepBackup.on_train_batch_end
    try:
        resumable_run(strategy, inputs, out / "resumed")
    except Killed:
        pass
    StepBackup.on_train_batch_end = original
    resumed = resumable_run(strategy, inputs, out / "resumed")
    save_weights(out / "resume.npz", {"whole": whole.model.get_weights(), "resumed": resumed.model.get_weights()})
    report = {name: run_report(run, out / name) for name, run in (("whole", whole), ("resumed", resumed))}
    (out / "resume.json").write_text(json.dumps({**report, "replicas": strategy.num_replicas_in_sync}))


def sigkill(step):
    os.kill(os.getpid(), signal.SIGKILL)


def resume_worker(index, ports, out, dying, kill_after, *names):
    """One of two MultiWorkerMirrored workers: the resumable run into each `out/NAME` in
    turn; with `kill_after` > 0, worker `dying` dies (SIGKILL) right after that step of the
    last, leaving the other waiting for it in the next step. Each finished run's weights and
    report go to `out/NAME-workerINDEX.npz` / `.json`."""
    set_tf_config(index, ports)
    from bert_keras.training import distribute
    from bert_keras.training.backup import StepBackup

    out = Path(out)
    strategy = distribute.resolve_strategy("multi_worker")
    inputs = json.loads((out / "inputs.json").read_text())
    original = StepBackup.on_train_batch_end
    for position, name in enumerate(names):
        if int(kill_after) and index == dying and position == len(names) - 1:
            StepBackup.on_train_batch_end = killed_after(int(kill_after), sigkill)
        run = resumable_run(strategy, inputs, out / name)
        StepBackup.on_train_batch_end = original
        save_weights(out / f"{name}-worker{index}.npz", {"final": run.model.get_weights()})
        report = {**run_report(run, out / name), "replicas": strategy.num_replicas_in_sync}
        (out / f"{name}-worker{index}.json").write_text(json.dumps(report))


def save_weights(path, runs):
    """{run name: list of arrays} -> one .npz ("name.index" keys)."""
    import numpy as np

    np.savez(path, **{f"{name}.{i}": array for name, arrays in runs.items() for i, array in enumerate(arrays)})


def load_weights(path):
    """The inverse of `save_weights`."""
    import numpy as np

    runs = {}
    with np.load(path) as stored:
        for key in sorted(stored.files, key=lambda key: (key.rsplit(".", 1)[0], int(key.rsplit(".", 1)[1]))):
            runs.setdefault(key.rsplit(".", 1)[0], []).append(stored[key])
    return runs


def keras_20585_error(strategy):
    """The error unpatched Keras raises for `fit` under this strategy, or None once fixed."""
    import keras
    import tensorflow as tf

    with strategy.scope():
        inputs = keras.Input((2,))
        model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
        model.compile("sgd", "mse")
    data = strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensors((tf.ones([2, 2]), tf.ones([2, 1]))).repeat()
    )
    try:
        model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
    except ValueError as error:
        return str(error)[:300]
    return None


def set_tf_config(index, ports):
    """TF_CONFIG for worker `index` of a cluster on 127.0.0.1 `ports` ("port,port")."""
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports.split(",")]},
            "task": {"type": "worker", "index": int(index)},
        }
    )


def worker(index, ports, data, out):
    """One of two MultiWorkerMirrored workers: the upstream probe, then pre-training; the
    report says whether Keras' trainer was still patched after it."""
    set_tf_config(index, ports)
    import tensorflow as tf

    from bert_keras import compat
    from bert_keras.training import distribute

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    upstream_error = keras_20585_error(strategy)  # outside keras_20585_workaround: Keras as it is
    data, out = Path(data), Path(out)
    inputs = json.loads((data / "inputs.json").read_text())
    initial = load_weights(data / "initial.npz")["initial"]
    weights = pretrain(strategy, inputs["files"], initial, inputs["vocab_size"])
    save_weights(out / f"worker{index}.npz", {"final": weights})
    (out / f"worker{index}.json").write_text(
        json.dumps(
            {
                "upstream_error": upstream_error,
                "replicas": strategy.num_replicas_in_sync,
                "chief": distribute.is_chief(strategy),
                "patched_after": compat.keras_20585_patched(),
            }
        )
    )


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"mirrored": mirrored, "worker": worker, "resume": resume, "resume_worker": resume_worker}[mode](*rest)

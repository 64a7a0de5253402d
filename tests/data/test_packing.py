"""Packed pre-training rows: the same instances, several to a row, give the losses,
accuracies and gradients of the unpacked batch (the reference tiny checkpoint, dropout 0,
real instances made by `create-pretraining-data` from a Gutenberg novel); the encoder's
packed outputs equal each sequence run alone; first-fit-decreasing fills rows."""

import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require

from bert_keras import BertConfig
from bert_keras.data.packing import first_fit_decreasing, pack_instances
from bert_keras.models.pretrainer import BertPretrainer

TRAJECTORY = REFERENCE / "pretraining_trajectory"


def reference_pretrainer():
    config = BertConfig.from_json_file(require(TRAJECTORY / "config_nodrop.json"))
    return BertPretrainer.from_checkpoint(str(require(REFERENCE / "tiny_pretraining_tf1")), config=config)


def real_instances(count, shorten=True):
    """`count` instances of the reference TFRecords; with `shorten`, each cut to a varied
    length (its [SEP] kept last, its predictions kept inside), as short documents give."""
    from bert_keras.data.tfrecords import pretraining_dataset

    batch = next(iter(pretraining_dataset(str(TRAJECTORY / "train.tfrecord"), count, shuffle_buffer=0)))
    features = {name: value.numpy() for name, value in batch.items()}
    if shorten:
        rng = np.random.default_rng(0)
        for i in range(count):
            length = int(features["input_mask"][i].sum())
            keep = int(rng.integers(12, min(length, 64) + 1))
            features["input_word_ids"][i, keep - 1] = 102  # [SEP]
            features["input_word_ids"][i, keep:] = features["input_mask"][i, keep:] = 0
            features["input_type_ids"][i, keep:] = 0
            inside = (features["masked_lm_positions"][i] < keep - 1) & (features["masked_lm_weights"][i] > 0)
            features["masked_lm_weights"][i] = np.where(inside, features["masked_lm_weights"][i], 0.0)
            features["masked_lm_positions"][i] = np.where(inside, features["masked_lm_positions"][i], 0)
    return features


def losses_and_gradients(model, features):
    features = {name: tf.constant(value) for name, value in features.items()}
    for metric in model.metrics:
        metric.reset_state()
    with tf.GradientTape() as tape:
        outputs = model(features, training=True)
        loss = model.compute_loss(x=features, y_pred=outputs)
    gradients = tape.gradient(loss, model.trainable_variables)
    model.compute_metrics(features, None, outputs)
    metrics = {metric.name: float(metric.result()) for metric in model.metrics if metric.name != "loss"}
    return float(loss), metrics, [tf.convert_to_tensor(g).numpy() for g in gradients]


def test_packed_rows_train_exactly_as_the_instances_unpacked():
    model = reference_pretrainer()
    features = real_instances(24)
    packed = pack_instances(features, seq_length=128, max_sequences=4)
    rows = len(packed["input_word_ids"])
    assert rows < 24 * 0.5  # short instances: fewer than half as many rows
    assert packed["next_sentence_weights"].sum() == 24
    assert packed["masked_lm_weights"].sum() == features["masked_lm_weights"].sum()

    loss, metrics, gradients = losses_and_gradients(model, features)
    packed_loss, packed_metrics, packed_gradients = losses_and_gradients(model, packed)
    assert set(metrics) == {"masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy"}
    np.testing.assert_allclose(packed_loss, loss, rtol=1e-5)
    for name, value in metrics.items():
        np.testing.assert_allclose(packed_metrics[name], value, rtol=1e-5, err_msg=name)
    scale = max(float(np.abs(g).max()) for g in gradients)
    for variable, a, b in zip(model.trainable_variables, packed_gradients, gradients):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * scale, err_msg=variable.path)


def test_without_the_block_diagonal_mask_the_losses_differ():
    """The check above can fail: the same rows without `packed_sequence_ids` (every
    sequence seeing the others, positions running on) give other losses."""
    model = reference_pretrainer()
    features = real_instances(24)
    packed = pack_instances(features, seq_length=128, max_sequences=4)
    loss, *_ = losses_and_gradients(model, features)
    leaky = {name: value for name, value in packed.items() if name != "packed_sequence_ids"}
    leaky_loss, *_ = losses_and_gradients(
        model, {**leaky, "packed_sequence_ids": (packed["input_mask"] > 0).astype(np.int32)}
    )
    assert abs(leaky_loss - loss) > 1e-3


def test_each_packed_sequence_encodes_as_if_alone():
    model = reference_pretrainer()
    features = real_instances(6)
    packed = pack_instances(
        features, seq_length=256, max_sequences=3, rows=[[0, 1, 2], [3, 4], [5]], max_predictions=60
    )
    names = ("input_word_ids", "input_mask", "input_type_ids")
    alone = model.encoder({name: features[name] for name in names})["sequence_output"].numpy()
    together = model.encoder({name: packed[name] for name in (*names, "packed_sequence_ids")})[
        "sequence_output"
    ].numpy()
    lengths = features["input_mask"].sum(axis=1)
    for row, members in enumerate([[0, 1, 2], [3, 4], [5]]):
        start = 0
        for index in members:
            np.testing.assert_allclose(
                together[row, start : start + lengths[index]],
                alone[index, : lengths[index]],
                atol=1e-5,
                err_msg=f"instance {index}",
            )
            start += lengths[index]


def test_first_fit_decreasing_packs_every_instance_once_within_limits():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 129, size=500)
    rows = first_fit_decreasing(lengths, 128, 4)
    assert sorted(i for row in rows for i in row) == list(range(500))
    assert all(len(row) <= 4 and sum(lengths[i] for i in row) <= 128 for row in rows)
    assert len(rows) <= int(np.ceil(lengths.sum() / 128 * 1.1))  # within 10% of the lower bound
    predictions = np.maximum(1, np.round(lengths * 0.15)).astype(int)
    limited = first_fit_decreasing(lengths, 128, 4, predictions, 22)
    assert all(sum(predictions[i] for i in row) <= 22 for row in limited)
    assert sorted(i for row in limited for i in row) == list(range(500))
    with pytest.raises(ValueError, match="instance 0 has 130 tokens, more than seq_length 128"):
        first_fit_decreasing([130], 128, 4)
    features = real_instances(3)
    with pytest.raises(ValueError, match=r"instances \[0, 1, 2\] do not fit one row of 64 tokens, 4 sequences"):
        pack_instances(features, seq_length=64, max_sequences=4, rows=[[0, 1, 2]])


def short_documents(path, count=200):
    """SQuAD dev paragraphs as documents, one sentence a line: a corpus of short documents."""
    import json

    from conftest import DATA

    articles = json.loads(require(DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    paragraphs = [p["context"] for a in articles for p in a["paragraphs"]][:count]
    path.write_text(
        "\n\n".join("\n".join(s.strip() + "." for s in p.split(". ") if s.strip()) for p in paragraphs) + "\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
def test_pack_dataset_keeps_every_instance_of_the_stream(tmp_path):
    from conftest import DATA

    from bert_keras import BertTokenizer
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.data.packing import pack_dataset

    corpus = short_documents(tmp_path / "squad.txt", 60)
    tokenizer = BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")))
    instances = dynamic_masking_dataset([str(corpus)], tokenizer, 16, 256, 20, seed=3)
    window = next(iter(instances.unbatch().batch(128).take(1)))
    stream = tf.data.Dataset.from_tensors(window).unbatch().batch(16)  # the same instances, in batches
    rows = next(iter(pack_dataset(stream, 256, 6, rows_per_batch=1, window=128).unbatch().batch(1000)))

    def unpacked(features, sequence_ids=None):
        """(tokens, masked (position in the instance, id) pairs, next-sentence label) of each instance."""
        found = []
        for row in range(len(features["input_word_ids"])):
            ids = features["input_word_ids"][row].numpy()
            spans = (
                [(0, int(features["input_mask"][row].numpy().sum()), 0)]
                if sequence_ids is None
                else [
                    (int(np.argmax(sequence_ids[row] == k)), int((sequence_ids[row] == k).sum()), k - 1)
                    for k in range(1, int(sequence_ids[row].max()) + 1)
                ]
            )
            for start, length, slot in spans:
                weights = features["masked_lm_weights"][row].numpy() > 0
                positions = features["masked_lm_positions"][row].numpy()[weights]
                inside = (positions >= start) & (positions < start + length)
                label = features["next_sentence_labels"][row].numpy().reshape(-1)[slot]
                found.append(
                    (
                        tuple(ids[start : start + length]),
                        tuple(zip(positions[inside] - start, features["masked_lm_ids"][row].numpy()[weights][inside])),
                        int(label),
                    )
                )
        return sorted(found)

    assert unpacked(rows, rows["packed_sequence_ids"].numpy()) == unpacked(window)
    assert len(rows["input_word_ids"]) < 128 / 1.8  # short paragraphs: about two to a row at 256


@pytest.mark.slow
def test_pretrain_with_packing(tmp_path):
    """`pretrain --corpus ... --packing 4`: rows of several instances, the report of the
    packing, the usual metrics, and a resumed run that goes on where it stopped."""
    from conftest import DATA

    from bert_keras_cli.cli import main
    from bert_keras_cli.plot import read_curves

    corpus = short_documents(tmp_path / "squad.txt")
    output = tmp_path / "run"
    argv = [
        "pretrain",
        "--config",
        "tiny",
        "--vocab",
        str(require(DATA / "vocab" / "vocab.txt")),
        "--corpus",
        str(corpus),
        "--output",
        str(output),
        "--batch-size",
        "16",
        "--steps",
        "4",
        "--checkpoint-every",
        "2",
        "--warmup-steps",
        "1",
        "--seq-length",
        "256",
        "--packing",
        "4",
    ]
    assert main(argv) == 0
    report = json.loads((output / "packing_phase1.json").read_text())
    assert report["sequences_per_row"] > 1.8 and report["padding"] < report["padding_unpacked"] / 2
    assert report["rows_per_step"] == round(16 / report["sequences_per_row"])
    curves = read_curves(output)
    assert {"masked_lm_accuracy", "next_sentence_accuracy"} <= set(curves.series)
    assert main(argv[: argv.index("--steps") + 1] + ["6"] + argv[argv.index("--steps") + 2 :]) == 0  # resumes
    assert json.loads((output / "checkpoints" / "phase1" / "state.json").read_text())["epoch"] == 3

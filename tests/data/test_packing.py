"""Packed pre-training rows: the same instances, several to a row, give the losses,
accuracies and gradients of the unpacked batch (the reference tiny checkpoint, dropout 0,
real instances made by `create-pretraining-data` from a Gutenberg novel); the encoder's
packed outputs equal each sequence run alone; first-fit-decreasing fills rows."""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertConfig
from bert_keras.data.packing import first_fit_decreasing, pack_instances
from bert_keras.models.pretrainer import BertPretrainer

from conftest import REFERENCE, require

TRAJECTORY = REFERENCE / "pretraining_trajectory"


def reference_pretrainer():
    config = BertConfig.from_json_file(require(TRAJECTORY / "config_nodrop.json"))
    return BertPretrainer.from_checkpoint(str(require(REFERENCE / "tiny_pretraining_tf1")), config=config)


def real_instances(count, shorten=True):
    """`count` instances of the reference TFRecords; with `shorten`, each cut to a varied
    length (its [SEP] kept last, its predictions kept inside), as short documents give."""
    from bert_keras.data.pretraining_data import pretraining_dataset

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
    leaky_loss, *_ = losses_and_gradients(model, {**leaky, "packed_sequence_ids": (packed["input_mask"] > 0)
                                                  .astype(np.int32)})
    assert abs(leaky_loss - loss) > 1e-3


def test_each_packed_sequence_encodes_as_if_alone():
    model = reference_pretrainer()
    features = real_instances(6)
    packed = pack_instances(features, seq_length=256, max_sequences=3, rows=[[0, 1, 2], [3, 4], [5]])
    names = ("input_word_ids", "input_mask", "input_type_ids")
    alone = model.encoder({name: features[name] for name in names})["sequence_output"].numpy()
    together = model.encoder({name: packed[name] for name in (*names, "packed_sequence_ids")})["sequence_output"].numpy()
    lengths = features["input_mask"].sum(axis=1)
    for row, members in enumerate([[0, 1, 2], [3, 4], [5]]):
        start = 0
        for index in members:
            np.testing.assert_allclose(together[row, start : start + lengths[index]], alone[index, : lengths[index]],
                                       atol=1e-5, err_msg=f"instance {index}")
            start += lengths[index]


def test_first_fit_decreasing_packs_every_instance_once_within_limits():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 129, size=500)
    rows = first_fit_decreasing(lengths, 128, 4)
    assert sorted(i for row in rows for i in row) == list(range(500))
    assert all(len(row) <= 4 and sum(lengths[i] for i in row) <= 128 for row in rows)
    assert len(rows) <= int(np.ceil(lengths.sum() / 128 * 1.1))  # within 10% of the lower bound
    with pytest.raises(ValueError, match="instance 0 has 130 tokens, more than seq_length 128"):
        first_fit_decreasing([130], 128, 4)
    features = real_instances(3)
    with pytest.raises(ValueError, match=r"instances \[0, 1, 2\] do not fit one row of 64 tokens"):
        pack_instances(features, seq_length=64, max_sequences=4, rows=[[0, 1, 2]])

"""BertPretrainer: reference logits of Hugging Face BertForPreTraining, loss, saving."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require

from bert_keras import BertConfig, BertEncoder
from bert_keras.checkpoint import read_checkpoint
from bert_keras.models import saving
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.models.saving import save_checkpoint
from bert_keras.training.optimization import create_optimizer


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(require(REFERENCE / "tiny_pretraining_outputs.npz")))


def features(reference):
    return {name: reference[name] for name in ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")}


@pytest.mark.parametrize("folder", ["tiny_pretraining_tf1", "tiny_pretraining_hf"])
def test_reference_logits(reference, folder):
    pretrainer = BertPretrainer.from_checkpoint(require(REFERENCE / folder))
    outputs = pretrainer(features(reference), training=False)
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(), reference["mlm_logits_at_positions"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs["nsp_logits"].numpy(), reference["nsp_logits"], atol=1e-5, rtol=0)


def numpy_losses(mlm_logits, nsp_logits, ids, weights, labels):
    """The original get_masked_lm_output / get_next_sentence_output losses, in numpy."""

    def log_softmax(logits):
        logits = logits.astype(np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))

    mlm = -np.take_along_axis(log_softmax(mlm_logits), ids[..., None], -1)[..., 0]
    mlm_loss = (weights * mlm).sum() / (weights.sum() + 1e-5)
    nsp_loss = -np.take_along_axis(log_softmax(nsp_logits), labels[:, None], -1).mean()
    return mlm_loss, nsp_loss


def test_loss_and_metrics_match_the_original_definition(reference):
    pretrainer = BertPretrainer.from_checkpoint(require(REFERENCE / "tiny_pretraining_tf1"))
    rng = np.random.default_rng(0)
    x = features(reference)
    x["masked_lm_ids"] = rng.integers(0, 30522, size=(12, 8)).astype("int32")
    # Some padded prediction slots (weight 0) and a correct prediction to count.
    x["masked_lm_weights"] = (rng.random((12, 8)) < 0.7).astype("float32")
    x["next_sentence_labels"] = rng.integers(0, 2, size=(12, 1)).astype("int32")
    best = reference["mlm_logits_at_positions"].argmax(-1)
    x["masked_lm_ids"][:, :3] = best[:, :3]
    mlm_loss, nsp_loss = numpy_losses(
        reference["mlm_logits_at_positions"],
        reference["nsp_logits"],
        x["masked_lm_ids"],
        x["masked_lm_weights"],
        x["next_sentence_labels"][:, 0],
    )
    pretrainer.compile(optimizer="sgd")
    result = pretrainer.evaluate(tf.data.Dataset.from_tensor_slices(x).batch(12), return_dict=True, verbose=0)
    np.testing.assert_allclose(result["masked_lm_loss"], mlm_loss, rtol=1e-5)
    np.testing.assert_allclose(result["next_sentence_loss"], nsp_loss, rtol=1e-5)
    np.testing.assert_allclose(result["loss"], mlm_loss + nsp_loss, rtol=1e-5)
    w = x["masked_lm_weights"]
    expected_accuracy = ((best == x["masked_lm_ids"]) * w).sum() / w.sum()
    np.testing.assert_allclose(result["masked_lm_accuracy"], expected_accuracy, rtol=1e-6)
    nsp_accuracy = (reference["nsp_logits"].argmax(-1) == x["next_sentence_labels"][:, 0]).mean()
    np.testing.assert_allclose(result["next_sentence_accuracy"], nsp_accuracy, rtol=1e-6)


@pytest.mark.slow
def test_fit_on_a_fixed_batch_lowers_the_loss():
    config = BertConfig.preset("tiny", vocab_size=100)
    pretrainer = BertPretrainer(BertEncoder(config))
    rng = np.random.default_rng(1)
    x = {
        "input_word_ids": rng.integers(5, 100, size=(8, 16)).astype("int32"),
        "input_mask": np.ones((8, 16), "int32"),
        "input_type_ids": np.zeros((8, 16), "int32"),
        "masked_lm_positions": np.tile(np.arange(1, 5, dtype="int32"), (8, 1)),
        "masked_lm_ids": rng.integers(5, 100, size=(8, 4)).astype("int32"),
        "masked_lm_weights": np.ones((8, 4), "float32"),
        "next_sentence_labels": rng.integers(0, 2, size=(8, 1)).astype("int32"),
    }
    pretrainer.compile(optimizer=create_optimizer(1e-3, 30, 0))
    history = pretrainer.fit(tf.data.Dataset.from_tensors(x).repeat(30), verbose=0)
    assert set(history.history) >= {
        "loss",
        "masked_lm_loss",
        "next_sentence_loss",
        "masked_lm_accuracy",
        "next_sentence_accuracy",
    }
    # Chance level is log(100) + log(2); after 30 steps on one batch it must be well below.
    after = pretrainer.evaluate(tf.data.Dataset.from_tensors(x), return_dict=True, verbose=0)
    assert after["loss"] < np.log(100) + np.log(2) - 1.0, history.history["loss"]


def test_keras_round_trip(tmp_path, reference):
    pretrainer = BertPretrainer.from_checkpoint(require(REFERENCE / "tiny_pretraining_hf"))
    path = tmp_path / "pretrainer.keras"
    pretrainer.save(path)
    restored = BertPretrainer.from_checkpoint(path)
    a = pretrainer(features(reference), training=False)
    b = restored(features(reference), training=False)
    np.testing.assert_array_equal(a["mlm_logits"].numpy(), b["mlm_logits"].numpy())
    np.testing.assert_array_equal(a["nsp_logits"].numpy(), b["nsp_logits"].numpy())


@pytest.mark.parametrize("format", ["hf", "tf1"])
def test_save_with_heads_reproduces_the_checkpoint(tmp_path, format):
    source = require(REFERENCE / "tiny_pretraining_tf1")
    pretrainer = BertPretrainer.from_checkpoint(source)
    save_checkpoint(pretrainer, tmp_path / format, format)
    original = read_checkpoint(source).weights
    written_checkpoint = read_checkpoint(tmp_path / format)
    written, config = written_checkpoint.weights, written_checkpoint.config
    assert sorted(written) == sorted(original)
    for name in original:
        np.testing.assert_array_equal(written[name], original[name], err_msg=name)
    assert config.to_dict() == pretrainer.config.to_dict()


def test_checkpoint_without_heads_names_them(tmp_path):
    save_checkpoint(BertEncoder(BertConfig.preset("tiny")), tmp_path / "encoder", "hf")
    with pytest.raises(ValueError, match="cls/predictions/output_bias"):
        BertPretrainer.from_checkpoint(tmp_path / "encoder")


def test_new_heads_on_an_encoder_only_checkpoint(tmp_path, monkeypatch):
    """`new_heads=True` reads the checkpoint once and keeps its encoder weights exactly."""
    encoder = BertEncoder(BertConfig.preset("tiny"))
    save_checkpoint(encoder, tmp_path / "encoder", "hf")
    reads = []
    monkeypatch.setattr(
        saving, "read_checkpoint", lambda *args, **kwargs: reads.append(args) or read_checkpoint(*args, **kwargs)
    )
    with pytest.warns(UserWarning, match="no masked-LM/next-sentence heads"):
        pretrainer = BertPretrainer.from_checkpoint(tmp_path / "encoder", new_heads=True)
    assert len(reads) == 1
    for ours, theirs in zip(pretrainer.encoder.weights, encoder.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)


def test_inputs_without_positions_are_rejected(reference):
    pretrainer = BertPretrainer(BertEncoder(BertConfig.preset("tiny")))
    x = features(reference)
    del x["masked_lm_positions"]
    with pytest.raises(ValueError, match="masked_lm_positions"):
        pretrainer(x)


def test_without_next_sentence_the_loss_is_the_original_masked_lm_loss(reference, tmp_path):
    """`next_sentence=False` (No NSP): the reference checkpoint's MLM head and logits, the
    original's masked-LM loss alone, and checkpoints with no cls/seq_relationship."""
    source = require(REFERENCE / "tiny_pretraining_tf1")
    pretrainer = BertPretrainer.from_checkpoint(source, next_sentence=False)
    assert pretrainer.next_sentence_head is None
    outputs = pretrainer(features(reference), training=False)
    assert set(outputs) == {"mlm_logits"}
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(), reference["mlm_logits_at_positions"], atol=1e-5)
    rng = np.random.default_rng(1)
    x = features(reference)
    x["masked_lm_ids"] = rng.integers(0, 30522, size=(12, 8)).astype("int32")
    x["masked_lm_weights"] = (rng.random((12, 8)) < 0.7).astype("float32")  # no NSP labels at all
    mlm_loss, _ = numpy_losses(
        reference["mlm_logits_at_positions"],
        reference["nsp_logits"],
        x["masked_lm_ids"],
        x["masked_lm_weights"],
        np.zeros(12, int),
    )
    pretrainer.compile(optimizer="sgd")
    result = pretrainer.evaluate(tf.data.Dataset.from_tensor_slices(x).batch(12), return_dict=True, verbose=0)
    assert "next_sentence_loss" not in result and "next_sentence_accuracy" not in result
    np.testing.assert_allclose([result["loss"], result["masked_lm_loss"]], [mlm_loss, mlm_loss], rtol=1e-5)
    save_checkpoint(pretrainer, tmp_path / "tf1", "tf1")
    written = read_checkpoint(tmp_path / "tf1").weights
    original = read_checkpoint(source).weights
    assert sorted(written) == sorted(n for n in original if not n.startswith("cls/seq_relationship/"))
    pretrainer.save(tmp_path / "no_nsp.keras")
    restored = BertPretrainer.from_checkpoint(tmp_path / "no_nsp.keras")
    assert restored.next_sentence is False
    with pytest.raises(ValueError, match="no next-sentence head"):
        BertPretrainer.from_checkpoint(tmp_path / "no_nsp.keras", next_sentence=True)
    with pytest.warns(UserWarning, match="no next-sentence head: starting a new one"):
        with_nsp = BertPretrainer.from_checkpoint(tmp_path / "tf1", new_heads=True, next_sentence=True)
    np.testing.assert_allclose(
        with_nsp(features(reference))["mlm_logits"].numpy(), reference["mlm_logits_at_positions"], atol=1e-5
    )

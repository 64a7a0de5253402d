import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, REFERENCE, require
from harness import ODD_TINY as TINY
from harness import random_inputs

from bert_keras import BertConfig, BertEncoder, checkpoint
from bert_keras.checkpoint.tf1 import TF1_IGNORED, write_tf1
from bert_keras.models.saving import save_checkpoint
from bert_keras_cli.cli import main as cli

DOCS = Path(__file__).resolve().parents[2] / "docs"


def weights_of(encoder):
    return checkpoint.get_original_weights(encoder.original_weight_map())


def test_name_map_matches_a_released_checkpoint():
    """Every encoder variable of Google's BERT-Mini release, by name and shape."""
    folder = require(DATA / "checkpoint-names")
    released = tf.train.load_checkpoint(str(folder / "bert_model.ckpt")).get_variable_to_shape_map()
    released = {
        name: tuple(shape)
        for name, shape in released.items()
        if name.startswith("bert/") and not TF1_IGNORED.search(name)
    }
    encoder = BertEncoder(BertConfig.from_json_file(folder / "bert_config.json"))
    ours = {name: value.shape for name, value in weights_of(encoder).items()}
    assert ours == released


@pytest.mark.parametrize("format", ["hf", "tf1", "keras"])
def test_round_trips_are_exact(tmp_path, format):
    encoder = BertEncoder(TINY)
    target = tmp_path / ("model.keras" if format == "keras" else format)
    save_checkpoint(encoder, target, format)
    restored = BertEncoder.from_checkpoint(target)
    assert restored.config == TINY
    expected, actual = weights_of(encoder), weights_of(restored)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    inputs = random_inputs()
    np.testing.assert_array_equal(restored(inputs)["sequence_output"], encoder(inputs)["sequence_output"])


def test_hugging_face_export_uses_hugging_face_names_and_layout(tmp_path, minilm_dir):
    from safetensors.numpy import load_file

    encoder = BertEncoder.from_checkpoint(minilm_dir)
    save_checkpoint(encoder, tmp_path, "hf")
    written = load_file(str(tmp_path / "model.safetensors"))
    original = load_file(str(minilm_dir / "model.safetensors"))
    original.pop("embeddings.position_ids", None)
    assert written.keys() == original.keys()
    for name in original:
        np.testing.assert_array_equal(written[name], original[name], err_msg=name)
    assert (tmp_path / "vocab.txt").read_text() == (minilm_dir / "vocab.txt").read_text()


def test_original_checkpoint_names_written_back(tmp_path):
    source = require(REFERENCE / "tiny_pretraining_tf1")
    encoder = BertEncoder.from_checkpoint(source)
    save_checkpoint(encoder, tmp_path, "tf1")
    reference = tf.train.load_checkpoint(str(source / "bert_model.ckpt"))
    written = tf.train.load_checkpoint(str(tmp_path / "bert_model.ckpt"))
    names = [n for n in reference.get_variable_to_shape_map() if n.startswith("bert/")]
    assert sorted(names) == sorted(written.get_variable_to_shape_map())
    for name in names:
        np.testing.assert_array_equal(written.get_tensor(name), reference.get_tensor(name))


def test_checkpoint_problems_list_the_names(tmp_path):
    encoder = BertEncoder(TINY)
    weights = weights_of(encoder)
    weights.pop("bert/pooler/dense/bias")
    weights["bert/encoder/layer_9/output/dense/kernel"] = np.zeros((2, 2), "float32")
    weights["bert/embeddings/word_embeddings"] = np.zeros((5, 32), "float32")
    write_tf1(weights, TINY, tmp_path)
    with pytest.raises(ValueError) as error:
        BertEncoder.from_checkpoint(tmp_path)
    message = str(error.value)
    assert "missing" in message and "bert/pooler/dense/bias" in message
    assert "unexpected" in message and "layer_9/output/dense/kernel" in message
    assert "shape mismatch" in message and "(5, 32)" in message


def test_wrong_config_for_weights_is_a_clear_error():
    with pytest.raises(ValueError, match="shape mismatch"):
        BertEncoder.from_checkpoint(
            require(REFERENCE / "tiny_pretraining_hf"),
            config=BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2),
        )


def test_missing_and_unreadable_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        BertEncoder.from_checkpoint(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        BertEncoder.from_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="cannot read"):
        BertEncoder.from_checkpoint(tmp_path)


@pytest.mark.slow
def test_convert_command_chain(tmp_path, minilm_dir):
    assert cli(["convert", str(minilm_dir), "--to", "tf1", str(tmp_path / "tf1")]) == 0
    assert cli(["convert", "--from", "tf1", str(tmp_path / "tf1"), "--to", "keras", str(tmp_path / "m.keras")]) == 0
    assert cli(["convert", str(tmp_path / "m.keras"), "--to", "hf", str(tmp_path / "hf")]) == 0
    ref = np.load(require(REFERENCE / "minilm_l6_encoder.npz"))
    inputs = {k: ref[k].astype("int32") for k in ("input_word_ids", "input_mask", "input_type_ids")}
    mask = ref["input_mask"].astype(bool)
    output = BertEncoder.from_checkpoint(tmp_path / "hf")(inputs)["sequence_output"].numpy()
    assert np.abs(output[mask] - ref["sequence_output"][mask]).max() <= 2e-5
    assert cli(["convert", str(tmp_path / "missing"), "--to", "hf", str(tmp_path / "x")]) == 2


def test_the_public_names_are_the_documented_ones():
    """A new export of `bert_keras.checkpoint` is a choice: docs/checkpoints.md names each."""
    text = " ".join((DOCS / "checkpoints.md").read_text().split())
    start = text.index("`bert_keras.checkpoint`, whose public names are") + len("`bert_keras.checkpoint`")
    documented = set(re.findall(r"`(\w+)`", text[start : text.index(").", start)]))
    public = {name for name, value in vars(checkpoint).items() if not (name.startswith("_") or inspect.ismodule(value))}
    assert documented == set(checkpoint.__all__) == public

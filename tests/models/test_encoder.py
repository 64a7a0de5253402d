import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require
from harness import ODD_TINY, max_diff, random_inputs

from bert_keras import BertConfig, BertEncoder

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def reference_inputs(name):
    ref = np.load(require(REFERENCE / name))
    return ref, {k: ref[k].astype("int32") for k in INPUT_NAMES}


def test_real_weights_match_hugging_face(minilm_dir):
    ref, inputs = reference_inputs("minilm_l6_encoder.npz")
    encoder = BertEncoder.from_checkpoint(minilm_dir)
    outputs = encoder(inputs)
    mask = ref["input_mask"].astype(bool)
    assert max_diff(outputs["sequence_output"], ref["sequence_output"], mask) <= 2e-5
    assert max_diff(outputs["pooled_output"], ref["pooled_output"]) <= 2e-5
    assert len(outputs["encoder_outputs"]) == 6
    for layer, expected in zip(outputs["encoder_outputs"], ref["encoder_outputs"]):
        assert max_diff(layer, expected, mask) <= 2e-5


@pytest.mark.parametrize("folder", ["tiny_pretraining_tf1", "tiny_pretraining_hf"])
def test_tiny_checkpoints_match_reference(folder):
    ref, inputs = reference_inputs("tiny_pretraining_outputs.npz")
    encoder = BertEncoder.from_checkpoint(require(REFERENCE / folder))
    outputs = encoder(inputs)
    mask = ref["input_mask"].astype(bool)
    assert max_diff(outputs["sequence_output"], ref["sequence_output"], mask) <= 1e-5
    assert max_diff(outputs["pooled_output"], ref["pooled_output"]) <= 1e-5


def test_sequence_length_varies_between_calls_without_changing_results():
    ref, inputs = reference_inputs("tiny_pretraining_outputs.npz")
    encoder = BertEncoder.from_checkpoint(require(REFERENCE / "tiny_pretraining_tf1"))
    lengths = ref["input_mask"].sum(axis=1)
    row = int(np.argmin(lengths))
    for seq in (int(lengths[row]), int(lengths[row]) + 5, 128):
        short = {k: v[row : row + 1, :seq] for k, v in inputs.items()}
        outputs = encoder(short)
        assert outputs["sequence_output"].shape == (1, seq, 64)
        real = int(lengths[row])
        assert max_diff(outputs["sequence_output"][0, :real], ref["sequence_output"][row, :real]) <= 1e-5
        assert max_diff(outputs["pooled_output"][0], ref["pooled_output"][row]) <= 1e-5


def test_output_structure_and_attention_probs():
    encoder = BertEncoder(ODD_TINY)
    inputs = random_inputs()
    outputs = encoder(inputs, return_attention_probs=True)
    assert outputs["sequence_output"].shape == (3, 11, 32)
    assert outputs["pooled_output"].shape == (3, 32)
    assert [o.shape for o in outputs["encoder_outputs"]] == [(3, 11, 32)] * 2
    np.testing.assert_array_equal(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    for probs in outputs["attention_probs"]:
        probs = probs.numpy()
        assert probs.shape == (3, 4, 11, 11)
        np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
        assert np.all(probs[0, :, :, 5:] == 0.0), "padding keys must get zero attention"
    assert "attention_probs" not in encoder(inputs)


def test_output_positions_give_the_full_run_at_those_positions():
    """The pre-training path runs the last layer only where the heads read it."""
    encoder = BertEncoder(ODD_TINY)
    inputs = random_inputs()
    positions = np.array([[1, 4, 2], [0, 10, 3], [7, 7, 5]], "int32")
    full = encoder(inputs)
    sparse = encoder(inputs, output_positions=positions, return_attention_probs=True)
    expected = np.take_along_axis(full["sequence_output"].numpy(), positions[:, :, None], axis=1)
    assert sparse["sequence_output"].shape == (3, 3, 32)
    assert max_diff(sparse["sequence_output"], expected) <= 1e-5
    assert max_diff(sparse["pooled_output"], full["pooled_output"]) <= 1e-5
    np.testing.assert_array_equal(sparse["encoder_outputs"][0], full["encoder_outputs"][0])
    assert sparse["attention_probs"][-1].shape == (3, 4, 4, 11)  # [CLS] + 3 queries, all 11 keys


def test_pooled_output_is_tanh_dense_of_cls():
    encoder = BertEncoder(ODD_TINY)
    outputs = encoder(random_inputs())
    kernel, bias = (w.numpy() for w in encoder.pooler.dense.weights)
    expected = np.tanh(outputs["sequence_output"].numpy()[:, 0] @ kernel + bias)
    assert max_diff(outputs["pooled_output"], expected) <= 1e-6


def test_dropout_only_in_training():
    encoder = BertEncoder(ODD_TINY)
    inputs = random_inputs()
    first = encoder(inputs, training=False)["sequence_output"]
    np.testing.assert_array_equal(first, encoder(inputs)["sequence_output"])
    assert max_diff(encoder(inputs, training=True)["sequence_output"], first.numpy()) > 1e-3


def test_truncated_normal_initialisation():
    encoder = BertEncoder(BertConfig.preset("mini"))
    table = encoder.embeddings.word_embeddings.numpy()
    assert abs(table.std() - 0.02 * 0.88) < 1e-3  # std of N(0, 0.02) truncated at 2 sigma
    assert np.abs(table).max() <= 0.04 + 1e-6
    assert np.all(encoder.transformer_blocks[0].qkv_bias.numpy() == 0)


def test_reinitialised_top_layers_follow_the_initializer_and_the_rest_the_checkpoint(minilm_dir):
    """Zhang et al. (2021)'s re-initialisation of all-MiniLM-L6-v2's top 2 layers and pooler:
    kernels drawn from N(0, initializer_range) truncated at 2 sigma (scipy's truncnorm),
    biases 0, LayerNorm 1 and 0; the embeddings and the 4 layers below as in the safetensors file."""
    from safetensors.numpy import load_file
    from scipy import stats

    checkpoint = load_file(str(minilm_dir / "model.safetensors"))
    encoder = BertEncoder.from_checkpoint(minilm_dir)
    before = [weight.copy() for weight in encoder.get_weights()]
    keras.utils.set_random_seed(0)
    encoder.reinitialize_top_layers(2)
    stddev = encoder.config.initializer_range
    assert stddev == 0.02
    for block in [*encoder.transformer_blocks[4:], encoder.pooler.dense]:
        for variable in block.weights:
            value = variable.numpy()
            if variable.path.endswith("kernel"):
                flat = value.ravel()[:50_000]
                fit = stats.kstest(flat, stats.truncnorm(-2, 2, scale=stddev).cdf)
                assert fit.pvalue > 1e-3, (variable.path, fit)
            else:
                expected = 1.0 if variable.path.endswith("gamma") else 0.0
                np.testing.assert_array_equal(value, expected, err_msg=variable.path)
    changed = {
        variable.path for block in [*encoder.transformer_blocks[4:], encoder.pooler] for variable in block.weights
    }
    for variable, old in zip(encoder.weights, before):
        if variable.path in changed:  # the file's pooler bias is 0 already: the kernels tell
            assert variable.path.endswith("bias") or not np.allclose(variable.numpy(), old), variable.path
        else:
            np.testing.assert_array_equal(variable.numpy(), old, err_msg=variable.path)
    hf = {  # the file's names for a few of the weights kept
        "embeddings.word_embeddings.weight": encoder.embeddings.word_embeddings,
        "encoder.layer.3.output.LayerNorm.weight": encoder.transformer_blocks[3].output_layer_norm.gamma,
        "encoder.layer.3.output.dense.bias": encoder.transformer_blocks[3].output_bias,
        "encoder.layer.0.intermediate.dense.weight": encoder.transformer_blocks[0].intermediate_kernel,
    }
    for name, variable in hf.items():
        expected = checkpoint[name].T if name.endswith("dense.weight") else checkpoint[name]
        np.testing.assert_array_equal(variable.numpy(), expected, err_msg=name)
    with pytest.raises(ValueError, match=r"^cannot re-initialise 7 layers \(--reinit-layers, reinit_layers\): "):
        encoder.reinitialize_top_layers(7)


def test_get_config_and_keras_file_round_trip(tmp_path):
    encoder = BertEncoder(ODD_TINY)
    inputs = random_inputs()
    expected = encoder(inputs)
    clone = BertEncoder.from_config(encoder.get_config())
    assert clone.config == ODD_TINY
    path = tmp_path / "encoder.keras"
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertEncoder) and restored.config == ODD_TINY
    actual = restored(inputs)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(actual[key], expected[key])


def test_works_in_functional_models_and_tf_function():
    encoder = BertEncoder(ODD_TINY)
    symbolic = {name: keras.Input((None,), dtype="int32", name=name) for name in INPUT_NAMES}
    model = keras.Model(symbolic, encoder(symbolic)["pooled_output"])
    inputs = random_inputs()
    np.testing.assert_allclose(model(inputs), encoder(inputs)["pooled_output"], atol=1e-6)
    graph_call = tf.function(lambda x: encoder(x)["pooled_output"])
    for seq in (5, 9):
        np.testing.assert_allclose(
            graph_call(random_inputs(seq=seq)),
            encoder(random_inputs(seq=seq))["pooled_output"],
            atol=1e-6,
        )


def test_bad_inputs_are_clear_errors():
    encoder = BertEncoder(ODD_TINY)
    good = random_inputs()
    with pytest.raises(ValueError, match="missing .*input_mask"):
        encoder({k: v for k, v in good.items() if k != "input_mask"})
    with pytest.raises(TypeError, match="integer"):
        encoder({**good, "input_word_ids": good["input_word_ids"].astype("float32")})
    with pytest.raises(ValueError, match="same shape"):
        encoder({**good, "input_mask": good["input_mask"][:, :4]})
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        encoder({k: v[0] for k, v in good.items()})
    with pytest.raises(ValueError, match="max_position_embeddings"):
        encoder(random_inputs(seq=ODD_TINY.max_position_embeddings + 1))
    too_big = {**good, "input_word_ids": good["input_word_ids"] + ODD_TINY.vocab_size}
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocab_size"):
        encoder(too_big)
    with pytest.raises(tf.errors.InvalidArgumentError, match="type_vocab_size"):
        encoder({**good, "input_type_ids": good["input_type_ids"] + 2})
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative"):
        encoder({**good, "input_word_ids": good["input_word_ids"] - 200})
    with pytest.raises(TypeError, match="BertConfig"):
        BertEncoder("base")


def test_sequence_too_long_in_graph_mode_is_an_error():
    encoder = BertEncoder(ODD_TINY)
    spec = {n: tf.TensorSpec([None, None], tf.int32) for n in INPUT_NAMES}
    graph_call = tf.function(lambda x: encoder(x)["pooled_output"], input_signature=[spec])
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
        graph_call(random_inputs(seq=ODD_TINY.max_position_embeddings + 1))

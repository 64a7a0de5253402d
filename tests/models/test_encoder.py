import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require

from bert_keras import BertConfig, BertEncoder
from bert_keras.layers import BertEmbeddings, BertPooler, TransformerEncoderBlock
from bert_keras.layers.activations import ACTIVATIONS
from bert_keras.layers.dropout import PhiloxDropout

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
TINY = BertConfig(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=24,
)


def reference_inputs(name):
    ref = np.load(require(REFERENCE / name))
    return ref, {k: ref[k].astype("int32") for k in INPUT_NAMES}


def random_inputs(batch=3, seq=11, config=TINY, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), "int32")
    mask[0, seq // 2 :] = 0
    return {
        "input_word_ids": rng.integers(0, config.vocab_size, (batch, seq)).astype("int32") * mask,
        "input_mask": mask,
        "input_type_ids": (rng.random((batch, seq)) < 0.5).astype("int32") * mask,
    }


def max_diff(actual, expected, mask=None):
    actual = keras.ops.convert_to_numpy(actual)
    if mask is not None:
        actual, expected = actual[mask], expected[mask]
    return float(np.abs(actual - expected).max())


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
    encoder = BertEncoder(TINY)
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
    encoder = BertEncoder(TINY)
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
    encoder = BertEncoder(TINY)
    outputs = encoder(random_inputs())
    kernel, bias = (w.numpy() for w in encoder.pooler.dense.weights)
    expected = np.tanh(outputs["sequence_output"].numpy()[:, 0] @ kernel + bias)
    assert max_diff(outputs["pooled_output"], expected) <= 1e-6


def test_gelu_variants_follow_their_formulas():
    x = np.linspace(-6, 6, 101).astype("float32")
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert max_diff(ACTIVATIONS["gelu"](x), exact) <= 1e-6
    assert max_diff(ACTIVATIONS["gelu_tanh"](x), tanh) <= 1e-6
    assert max_diff(ACTIVATIONS["gelu_tanh"](x), exact) > 1e-4


def test_dropout_only_in_training():
    encoder = BertEncoder(TINY)
    inputs = random_inputs()
    first = encoder(inputs, training=False)["sequence_output"]
    np.testing.assert_array_equal(first, encoder(inputs)["sequence_output"])
    assert max_diff(encoder(inputs, training=True)["sequence_output"], first.numpy()) > 1e-3


@pytest.mark.parametrize("jit_compile", [False, True])
def test_philox_dropout_rate_scale_and_fresh_masks(jit_compile):
    dropout = PhiloxDropout(0.1)
    ones = tf.ones((400, 250))
    draw = tf.function(lambda x: dropout(x, training=True), jit_compile=jit_compile)
    first, second = draw(ones).numpy(), draw(ones).numpy()
    for sample in (first, second):
        # 100,000 draws: the dropped fraction is 0.1 within 5 standard deviations (0.0047).
        assert abs((sample == 0).mean() - 0.1) < 0.0047
        np.testing.assert_allclose(np.unique(sample), [0.0, 1 / 0.9], rtol=1e-6)
    assert (first != second).mean() > 0.1  # a new mask on every call
    np.testing.assert_array_equal(dropout(ones, training=False), ones)
    with pytest.raises(ValueError, match="noise_shape"):
        PhiloxDropout(0.1, noise_shape=(1, 250))
    with pytest.raises(ValueError, match="rate"):
        PhiloxDropout(1.0)
    odd = draw(tf.ones((3, 5, 7))).numpy()  # an odd size: the last word's high half unused
    assert odd.shape == (3, 5, 7) and set(np.unique(odd)) <= {0.0, np.float32(1 / 0.9)}


def test_truncated_normal_initialisation():
    encoder = BertEncoder(BertConfig.preset("mini"))
    table = encoder.embeddings.word_embeddings.numpy()
    assert abs(table.std() - 0.02 * 0.88) < 1e-3  # std of N(0, 0.02) truncated at 2 sigma
    assert np.abs(table).max() <= 0.04 + 1e-6
    assert np.all(encoder.transformer_blocks[0].qkv_bias.numpy() == 0)


def test_get_config_and_keras_file_round_trip(tmp_path):
    encoder = BertEncoder(TINY)
    inputs = random_inputs()
    expected = encoder(inputs)
    clone = BertEncoder.from_config(encoder.get_config())
    assert clone.config == TINY
    path = tmp_path / "encoder.keras"
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertEncoder) and restored.config == TINY
    actual = restored(inputs)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(actual[key], expected[key])


@pytest.mark.parametrize(
    "layer",
    [
        BertEmbeddings(vocab_size=10, hidden_size=8, max_position_embeddings=6, dropout_rate=0.2),
        TransformerEncoderBlock(hidden_size=8, num_attention_heads=2, intermediate_size=16, hidden_act="gelu_tanh"),
        BertPooler(hidden_size=8),
    ],
)
def test_layers_serialise_through_get_config(layer):
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is type(layer)
    assert restored.get_config() == layer.get_config()


def test_works_in_functional_models_and_tf_function():
    encoder = BertEncoder(TINY)
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
    encoder = BertEncoder(TINY)
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
        encoder(random_inputs(seq=TINY.max_position_embeddings + 1))
    too_big = {**good, "input_word_ids": good["input_word_ids"] + TINY.vocab_size}
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocab_size"):
        encoder(too_big)
    with pytest.raises(tf.errors.InvalidArgumentError, match="type_vocab_size"):
        encoder({**good, "input_type_ids": good["input_type_ids"] + 2})
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative"):
        encoder({**good, "input_word_ids": good["input_word_ids"] - 200})
    with pytest.raises(TypeError, match="BertConfig"):
        BertEncoder("base")


def test_sequence_too_long_in_graph_mode_is_an_error():
    encoder = BertEncoder(TINY)
    spec = {n: tf.TensorSpec([None, None], tf.int32) for n in INPUT_NAMES}
    graph_call = tf.function(lambda x: encoder(x)["pooled_output"], input_signature=[spec])
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
        graph_call(random_inputs(seq=TINY.max_position_embeddings + 1))

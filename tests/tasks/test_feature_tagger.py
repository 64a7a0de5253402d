"""`BertFeatureTagger`: the chosen layers' features (checked against the Hugging Face
reference of all-MiniLM-L6-v2), each way of combining them, the frozen encoder, and bad
layer lists."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require
from harness import TINY, run_task_test, tiny_encoder, tiny_preprocessor

from bert_keras import BertEncoder
from bert_keras.tasks.feature_tagger import BertFeatureTagger, LayerMix

WORDS = [["john", "lives", "in", "paris", "."], ["the", "quick", "brown", "fox", "jumps"], ["a", "dog"]]
LABELS = [[1, 0, 0, 5, 0], [0, 0, 0, 3, 4], [0, 7]]


def test_features_are_the_reference_layers(minilm_dir):
    reference = dict(np.load(require(REFERENCE / "minilm_l6_encoder.npz")))
    tagger = BertFeatureTagger(BertEncoder.from_checkpoint(minilm_dir), 9, layers=["embeddings", 0, -1], lstm_units=4)
    inputs = {name: reference[name][:4].astype("int32") for name in ("input_word_ids", "input_mask", "input_type_ids")}
    features = tagger.features(inputs).numpy()
    expected = [
        reference["embedding_output"][:4],
        reference["encoder_outputs"][0, :4],
        reference["encoder_outputs"][5, :4],
    ]
    mask = inputs["input_mask"].astype(bool)
    assert features.shape == (4, 128, 3, 384)
    for index, layer in enumerate(expected):
        np.testing.assert_allclose(features[:, :, index][mask], layer[mask], atol=2e-4)


@pytest.mark.parametrize("combine", ["concat", "sum", "weighted"])
def test_layer_mix_combines_as_named(combine):
    stacked = np.random.default_rng(0).normal(size=(2, 5, 3, 4)).astype("float32")
    mix = LayerMix(combine)
    mix.build(stacked.shape)
    if combine == "weighted":
        mix.layer_weights.assign([0.5, -1.0, 2.0])
        mix.gamma.assign(1.5)
    combined = mix(tf.constant(stacked)).numpy()
    if combine == "concat":
        expected = np.concatenate([stacked[:, :, i] for i in range(3)], axis=-1)
    elif combine == "sum":
        expected = stacked[:, :, 0] + stacked[:, :, 1] + stacked[:, :, 2]
    else:
        weights = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
        expected = 1.5 * sum(weights[i] * stacked[:, :, i] for i in range(3))
    np.testing.assert_allclose(combined, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("combine", ["concat", "sum", "weighted"])
def test_training_moves_the_head_and_never_the_encoder(combine):
    tagger = BertFeatureTagger(
        tiny_encoder(),
        9,
        layers=[-1, -2, "embeddings"],
        combine=combine,
        lstm_units=6,
        preprocessor=tiny_preprocessor(),
    )
    packed, _ = tagger.word_start_positions(tf.ragged.constant(WORDS))
    length = packed["input_word_ids"].shape[1]  # "jumps" is two pieces
    assert length == 8
    assert tagger.features(packed).shape == (3, length, 3, TINY.hidden_size)
    assert tagger(packed).shape == (3, length, 9)
    mixed_width = {"concat": 3 * TINY.hidden_size, "sum": TINY.hidden_size, "weighted": TINY.hidden_size}[combine]
    assert tagger.bilstm.lstms[0].forward_layer.cell.kernel.shape == (mixed_width, 4 * 6)
    assert tagger.logits.kernel.shape == (2 * 6, 9)
    encoder_before = [w.numpy().copy() for w in tagger.encoder.weights]
    head_before = [w.numpy().copy() for w in tagger.trainable_weights]
    tagger.compile(optimizer=keras.optimizers.Adam(1e-2))
    tagger.fit(tf.ragged.constant(WORDS), tf.ragged.constant(LABELS), epochs=2, batch_size=3, verbose=0)
    assert all(np.array_equal(b, w.numpy()) for b, w in zip(encoder_before, tagger.encoder.weights))
    assert all(not np.array_equal(b, w.numpy()) for b, w in zip(head_before, tagger.trainable_weights))
    assert not tagger.encoder.trainable_weights


def test_saved_tagger_reloads_frozen_and_tags_raw_words(tmp_path):
    tagger = BertFeatureTagger(
        tiny_encoder(), 9, layers=[0], combine="weighted", lstm_units=5, preprocessor=tiny_preprocessor()
    )
    tagger.labels = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
    tagger.save(tmp_path / "tagger.keras")
    loaded = keras.saving.load_model(tmp_path / "tagger.keras")
    assert loaded.layer_names == [0] and loaded.bilstm.combine == "weighted" and not loaded.encoder.trainable
    packed, _ = tagger.word_start_positions(tf.ragged.constant(WORDS))
    np.testing.assert_allclose(loaded(packed).numpy(), tagger(packed).numpy(), atol=1e-6)
    tags = loaded.tag(WORDS[0])
    assert len(tags) == 5 and all(tag in loaded.labels for tag in tags)
    logits = tagger(tagger.word_start_positions(tf.ragged.constant(WORDS[:1]))[0]).numpy()[0]
    assert tags == [loaded.labels[i] for i in np.argmax(logits[1:6], axis=-1)]  # one piece a word


@pytest.mark.parametrize(
    "layers, message",
    [
        ([], "none given"),
        ([2], "out of range"),
        ([-3], "out of range"),
        (["last"], "not an integer"),
        ([0, -2], "twice"),
    ],
)
def test_bad_layers_are_a_clear_error(layers, message):
    with pytest.raises(ValueError, match=message):
        BertFeatureTagger(tiny_encoder(), 9, layers=layers)


@pytest.mark.slow
def test_exported_tagger_tags_each_word_at_its_first_piece(tmp_path):
    tagger = BertFeatureTagger(
        tiny_encoder(), 3, layers=[-1, "embeddings"], lstm_units=4, preprocessor=tiny_preprocessor()
    )
    texts = ["john lives in paris .", "the quick brown fox"]  # whole vocabulary entries: one piece a word

    def check(model, out):
        logits = model(model.preprocessor(tf.constant(texts))).numpy()
        for row, text in enumerate(texts):
            count = len(text.split())
            assert out["num_words"][row] == count
            assert out["tag_ids"][row, :count].tolist() == logits[row, 1 : count + 1].argmax(-1).tolist()

    words = tf.ragged.constant([text.split() for text in texts])
    run_task_test(
        tagger,
        tmp_path,
        words,
        {"text": texts},
        check,
        fit_data=(words, tf.ragged.constant([[1, 0, 0, 2, 0], [0, 0, 0, 1]])),
    )

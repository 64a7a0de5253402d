"""Task heads on a tiny random encoder: shapes, documented outputs, losses checked by
hand in numpy, `.keras` round trips, raw strings through fit/predict."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, require
from harness import run_serialization_test

from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.feature_extractor import BertFeatureExtractor
from bert_keras.tasks.multiple_choice import BertMultipleChoice
from bert_keras.tasks.span_labeler import BertSpanLabeler
from bert_keras.tasks.token_classifier import IGNORE_LABEL, BertTokenClassifier

TINY = BertConfig(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)


@pytest.fixture(scope="module")
def vocab():
    return str(require(DATA / "vocab" / "vocab.txt"))


@pytest.fixture(scope="module")
def preprocessor(vocab):
    return BertPreprocessor(BertTokenizer(vocab), seq_length=None)


def encoder(layers=1):
    """One layer where the test is of the head (each layer's trace costs a fit seconds)."""
    return BertEncoder(dataclasses.replace(TINY, num_hidden_layers=layers))


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def packed(preprocessor, *segments, seq_length=None):
    return preprocessor.bert_pack_inputs(
        [preprocessor.tokenizer(tf.constant(s)) for s in segments], seq_length=seq_length
    )


def test_classifier_logits_and_new_weights(preprocessor):
    model = BertClassifier(encoder(), num_classes=3)
    inputs = packed(preprocessor, ["a good film", "bad"])
    logits = model(inputs)
    assert logits.shape == (2, 3) and logits.dtype == tf.float32
    kernel = model.logits.kernel.numpy()
    assert kernel.shape == (32, 3)
    # Truncated normal, stddev 0.02: every value within two standard deviations.
    assert np.abs(kernel).max() <= 0.04 and np.all(model.logits.bias.numpy() == 0)
    # Logits are the dense layer on the pooled [CLS] vector (no dropout at inference).
    pooled = model.encoder(inputs)["pooled_output"].numpy()
    np.testing.assert_allclose(logits.numpy(), pooled @ kernel, atol=1e-5)


def test_classifier_losses_are_the_documented_ones(preprocessor):
    inputs = packed(preprocessor, ["one", "two words", "three words here"])
    classifier = BertClassifier(encoder(), num_classes=3)
    classifier.compile()
    labels = np.array([2, 0, 1])
    logits = classifier.predict(inputs, verbose=0)
    expected = -log_softmax(logits)[np.arange(3), labels].mean()
    loss, accuracy = classifier.evaluate(inputs, labels, verbose=0)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert accuracy == pytest.approx(np.mean(logits.argmax(-1) == labels))

    regressor = BertClassifier(encoder(), num_classes=1)
    regressor.compile()
    scores = np.array([0.5, 3.0, 4.2], "float32")
    predicted = regressor.predict(inputs, verbose=0)
    assert predicted.shape == (3, 1)
    assert regressor.evaluate(inputs, scores, verbose=0) == pytest.approx(
        np.mean((predicted[:, 0] - scores) ** 2), rel=1e-5
    )


@pytest.mark.slow
def test_classifier_fits_raw_strings_and_pairs(preprocessor):
    model = BertClassifier(encoder(), num_classes=2, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    texts = np.array(["great fun", "awful mess", "really great", "truly awful"] * 4)
    labels = np.array([1, 0, 1, 0] * 4)
    history = model.fit(texts, labels, batch_size=4, epochs=3, verbose=0, validation_data=(texts, labels))
    assert len(history.history["loss"]) == 3 and "val_accuracy" in history.history
    # Raw text through predict is the same as packing it first.
    raw = model.predict(texts[:3], verbose=0)
    np.testing.assert_allclose(raw, model(preprocessor(tf.constant(texts[:3]))).numpy(), atol=1e-5)
    # Sentence pairs as a tuple of segments, in fit and predict.
    pairs = (["is it", "was it"], ["good", "bad"])
    assert model.segments == ("text",)
    model.fit(pairs, np.array([1, 0]), verbose=0)
    expected = model(preprocessor((tf.constant(pairs[0]), tf.constant(pairs[1])))).numpy()
    np.testing.assert_allclose(model.predict(pairs, verbose=0), expected, atol=1e-5)
    # Fit last on pairs, it is a pair model: single texts are refused, not answered.
    assert model.segments == ("text_a", "text_b")
    with pytest.raises(ValueError, match="trained on 2 text input"):
        model.predict(texts[:3], verbose=0)


@pytest.mark.slow
def test_evaluate_and_predict_start_one_iterator(preprocessor, monkeypatch):
    """Keras starts the next epoch's iterator as a pass over a dataset of known length ends,
    and `evaluate` and `predict` never read it (`tasks.preprocessing.one_pass`). When Keras
    itself starts one iterator, the first assertion fails and `one_pass` can go."""
    model = BertClassifier(encoder(), num_classes=2, preprocessor=preprocessor)
    model.compile(optimizer="adam", metrics=["accuracy"])
    texts, labels = np.array(["great fun", "awful mess", "really great"] * 3), np.array([1, 0, 1] * 3)
    dataset = model.preprocessed_dataset(texts, labels, batch_size=4)
    started = []
    start = tf.data.Dataset.__iter__
    monkeypatch.setattr(tf.data.Dataset, "__iter__", lambda self: started.append(self) or start(self))
    keras_logits = keras.Model.predict(model, dataset.map(lambda x, y: x), verbose=0)
    keras_metrics = keras.Model.evaluate(model, dataset, verbose=0, return_dict=True)
    assert len(started) == 4  # two a pass
    started.clear()
    np.testing.assert_array_equal(model.predict(texts, batch_size=4, verbose=0), keras_logits)
    assert model.evaluate(texts, labels, batch_size=4, verbose=0, return_dict=True) == keras_metrics
    assert model.evaluate(dataset, verbose=0, return_dict=True) == keras_metrics
    assert len(started) == 3


class PremiseHypothesisClassifier(BertClassifier):
    text_input_names = ("premise", "hypothesis")


@pytest.mark.slow
def test_declared_text_inputs_name_fit_inputs_and_the_export(preprocessor, tmp_path):
    """One declaration (`text_input_names`) names both what `fit` records and what an
    export of a model never fit on raw text serves."""
    from bert_keras.serving import export

    unfit = PremiseHypothesisClassifier(encoder(), num_classes=2, preprocessor=preprocessor)
    path = export.export_for_serving(unfit, preprocessor, tmp_path / "export", version=1)
    assert set(export.describe_signatures(path)["serving_default"]["inputs"]) == {"premise", "hypothesis"}
    model = PremiseHypothesisClassifier(encoder(), num_classes=2, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.fit((["is it", "was it"], ["good", "bad"]), np.array([1, 0]), verbose=0)
    assert model.segments == ("premise", "hypothesis")
    # A span labeler's own declaration: a question and a context.
    assert BertSpanLabeler(encoder()).serving_signature(preprocessor).segments == ("question", "context")


def test_raw_strings_need_a_preprocessor_and_call_needs_packed_inputs(preprocessor):
    model = BertClassifier(encoder())
    with pytest.raises(ValueError, match="has no preprocessor"):
        model.predict(np.array(["text"]), verbose=0)
    with pytest.raises(ValueError, match="packed dict"):
        model(tf.constant(["text"]))
    with pytest.raises(TypeError, match="BertEncoder"):
        BertClassifier(keras.layers.Dense(2))


def test_token_classifier_labels_the_first_piece_of_each_word(preprocessor):
    model = BertTokenClassifier(encoder(), num_classes=5, preprocessor=preprocessor)
    words = tf.ragged.constant([["EU", "rejects", "unaffable", "call"], ["Hello", "world"]])
    labels = tf.ragged.constant([[1, 0, 2, 0], [3, 4]])
    inputs, targets = model.preprocess_samples(words, labels)
    # unaffable -> una ##ffa ##ble: only "una" carries the word's label.
    np.testing.assert_array_equal(
        inputs["input_word_ids"].numpy(),
        [[101, 7327, 19164, 14477, 20961, 3468, 2655, 102], [101, 7592, 2088, 102, 0, 0, 0, 0]],
    )
    np.testing.assert_array_equal(targets.numpy(), [[-1, 1, 0, 2, -1, -1, 0, -1], [-1, 3, 4, -1, -1, -1, -1, -1]])
    _, positions = model.word_start_positions(words)
    assert positions.to_list() == [[1, 2, 3, 6], [1, 2]]
    logits = model(inputs)
    assert logits.shape == (2, 8, 5)


def test_token_classifier_truncation_drops_labels_of_cut_words(vocab):
    short = BertPreprocessor(BertTokenizer(vocab), seq_length=5)
    model = BertTokenClassifier(encoder(), num_classes=3, preprocessor=short)
    words = tf.ragged.constant([["EU", "unaffable", "call"]])
    inputs, targets = model.preprocess_samples(words, tf.ragged.constant([[1, 2, 0]]))
    # [CLS] eu una ##ffa [SEP]: "call" is cut; "unaffable" keeps its first piece.
    np.testing.assert_array_equal(inputs["input_word_ids"].numpy(), [[101, 7327, 14477, 20961, 102]])
    np.testing.assert_array_equal(targets.numpy(), [[-1, 1, 2, -1, -1]])
    assert model.word_start_positions(words)[1].to_list() == [[1, 2, -1]]


@pytest.mark.slow
def test_token_classifier_loss_averages_over_labelled_positions_only(preprocessor):
    model = BertTokenClassifier(encoder(), num_classes=4, preprocessor=preprocessor)
    model.compile()
    words = [["EU", "rejects", "unaffable"], ["Hello"]]
    labels = [[1, 0, 3], [2]]
    inputs, targets = model.preprocess_samples(tf.ragged.constant(words), tf.ragged.constant(labels))
    logits = model(inputs).numpy()
    targets = targets.numpy()
    rows, cols = np.nonzero(targets != IGNORE_LABEL)
    expected = -log_softmax(logits)[rows, cols, targets[rows, cols]].mean()
    assert len(rows) == 4
    assert model.evaluate(words, labels, verbose=0) == pytest.approx(expected, rel=1e-5)
    history = model.fit(words, labels, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.slow
def test_span_labeler_masks_padding_and_uses_the_mean_of_both_losses(preprocessor):
    model = BertSpanLabeler(encoder(), preprocessor=preprocessor)
    question, context = ["who wrote it?"], ["it was written by someone"]
    short = packed(preprocessor, question, context)
    long = packed(preprocessor, question, context, seq_length=32)
    a, b = model(short), model(long)
    length = int(short["input_mask"].numpy().sum())
    for name in ("start_logits", "end_logits"):
        assert b[name].shape == (1, 32)
        np.testing.assert_allclose(a[name].numpy()[0, :length], b[name].numpy()[0, :length], atol=1e-4)
        assert np.all(b[name].numpy()[0, length:] < -9000)
    model.compile()
    starts, ends = np.array([9]), np.array([10])
    out = model.predict(long, verbose=0)
    expected = -(log_softmax(out["start_logits"])[0, 9] + log_softmax(out["end_logits"])[0, 10]) / 2
    loss = model.evaluate(long, {"start_logits": starts, "end_logits": ends}, verbose=0, return_dict=True)["loss"]
    assert loss == pytest.approx(expected, rel=1e-4)
    raw = model.predict((question, context), verbose=0)
    np.testing.assert_allclose(raw["start_logits"], a["start_logits"].numpy(), atol=1e-5)


@pytest.mark.slow
def test_multiple_choice_scores_each_pair_like_a_single_choice(preprocessor):
    model = BertMultipleChoice(encoder(), preprocessor=preprocessor)
    context = np.array(["she opened the door", "he sat"])
    choices = np.array([["and left", "and flew", "quietly"], ["down", "up", "on a chair"]])
    inputs = model.preprocess_samples((context, choices))
    assert inputs["input_word_ids"].shape[:2] == (2, 3)
    scores = model(inputs).numpy()
    assert scores.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            single = packed(preprocessor, [context[i]], [choices[i, j]])
            length = single["input_word_ids"].shape[1]
            np.testing.assert_array_equal(inputs["input_word_ids"][i, j, :length], single["input_word_ids"][0])
    np.testing.assert_allclose(model.predict((context, choices), verbose=0), scores, atol=1e-5)
    with pytest.raises(ValueError, match=r"shaped \[batch, choices, seq\]"):
        model(packed(preprocessor, ["two-dimensional inputs"]))
    model.compile()
    assert np.isfinite(model.fit((context, choices), np.array([0, 2]), verbose=0).history["loss"][0])


def test_feature_extractor_layers_combinations_and_pooling(preprocessor):
    enc = encoder(layers=2)
    inputs = packed(preprocessor, ["a much longer sentence than the other", "short"])
    outputs = enc(inputs)["encoder_outputs"]
    last, second = outputs[-1].numpy(), outputs[-2].numpy()
    mask = inputs["input_mask"].numpy()

    concat = BertFeatureExtractor(enc, layers=(-1, -2), combine="concat", pooling="mean")(inputs)
    np.testing.assert_allclose(concat["token_features"], np.concatenate([last, second], -1), atol=1e-5)
    tokens = np.concatenate([last, second], -1)
    mean = (tokens * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(concat["sentence_features"], mean, atol=1e-5)

    summed = BertFeatureExtractor(enc, layers=(-1, -2), combine="sum", pooling="cls")(inputs)
    np.testing.assert_allclose(summed["sentence_features"], (last + second)[:, 0], atol=1e-5)

    stacked = BertFeatureExtractor(enc, layers=(0, -1), combine="stack")(inputs)
    assert stacked["token_features"].shape == (2, mask.shape[1], 2, 32)
    assert stacked["sentence_features"].shape == (2, 2, 32)
    np.testing.assert_allclose(stacked["token_features"][:, :, 0], outputs[0].numpy(), atol=1e-5)

    with pytest.raises(ValueError, match="layers must be indices"):
        BertFeatureExtractor(enc, layers=(-3,))
    with pytest.raises(ValueError, match="combine"):
        BertFeatureExtractor(enc, layers=(-1,), combine="max")


@pytest.mark.parametrize(
    "make",
    [
        lambda p: BertClassifier(encoder(), num_classes=3, dropout=0.2, preprocessor=p),
        lambda p: BertTokenClassifier(encoder(), num_classes=9, preprocessor=p),
        lambda p: BertSpanLabeler(encoder(), preprocessor=p),
        lambda p: BertMultipleChoice(encoder()),
        lambda p: BertFeatureExtractor(encoder(layers=2), layers=(-1, 0), combine="sum", pooling="cls", preprocessor=p),
    ],
    ids=["classifier", "token_classifier", "span_labeler", "multiple_choice", "feature_extractor"],
)
def test_keras_file_round_trip(make, preprocessor, tmp_path):
    model = make(preprocessor)
    inputs = packed(preprocessor, ["first text here", "second"], ["pair", "b"])
    if isinstance(model, BertMultipleChoice):
        inputs = {name: tf.stack([t, t], axis=1) for name, t in inputs.items()}
    model.compile() if not isinstance(model, BertFeatureExtractor) else None
    loaded = run_serialization_test(model, inputs, tmp_path)
    assert (loaded.preprocessor is None) == (model.preprocessor is None)


@pytest.mark.slow
def test_from_checkpoint_on_real_weights_builds_the_preprocessor(minilm_dir):
    model = BertClassifier.from_checkpoint(minilm_dir, num_classes=2, seq_length=None)
    assert model.encoder.config.hidden_size == 384
    assert model.preprocessor.tokenizer.lower_case
    reference = BertEncoder.from_checkpoint(minilm_dir)
    inputs = model.preprocessor(tf.constant(["The Quick brown fox."]))
    np.testing.assert_allclose(
        model.encoder(inputs)["pooled_output"].numpy(), reference(inputs)["pooled_output"].numpy(), atol=1e-6
    )
    assert model.predict(["raw text works"], verbose=0).shape == (1, 2)
    bare = BertSpanLabeler.from_checkpoint(minilm_dir, preprocessor=False)
    assert bare.preprocessor is None

"""Long documents in windows (`doc_stride`): the classifier's pooling against numpy over
the same model's per-window logits, texts that fit one window answered as without
windows, max pooling learning evidence that sits in one window, and the served model
answering whole documents as `predict` does, refusing more than `max_windows`."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import ONE_LAYER_TINY, TOLERANCE, run_task_test, tiny_encoder, tiny_preprocessor

from bert_keras import BertClassifier, BertTextEmbedder
from bert_keras.serving.export import describe_signatures
from bert_keras.serving.tfserving.session import ServingError
from bert_keras.tasks.windowing import preprocess_windows, truncation_notice

LONG = "the quick brown fox jumps over the lazy dog , the cat was good , it is a bad film ."
TEXTS = [LONG, "a good film", "", LONG + " " + LONG, "who did go home ?"]
SHORT = ["the quick brown fox", "a good film", "", "who did go home ?"]
QUESTIONS = ["who did go home ?", "where ?", "a", "the cat", "is it good ?"]


def classifier(doc_stride=6, window_pooling="mean", num_classes=3, max_seq_length=16, **kwargs):
    return BertClassifier(
        tiny_encoder(config=ONE_LAYER_TINY),
        num_classes=num_classes,
        preprocessor=tiny_preprocessor(max_seq_length=max_seq_length),
        doc_stride=doc_stride,
        window_pooling=window_pooling,
        **kwargs,
    )


def window_logits(model, texts):
    """Each document's per-window logits, from the same weights without windows."""
    plain = BertClassifier(model.encoder, model.num_classes, preprocessor=model.preprocessor)
    plain.logits.set_weights(model.logits.get_weights())
    windows = preprocess_windows(model.preprocessor, texts, model.doc_stride)
    counts = windows.starts.row_lengths().numpy()
    return [
        plain({name: value[row, :count] for name, value in windows.inputs.items()}).numpy()
        for row, count in enumerate(counts)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "max"])
@pytest.mark.parametrize("pair", [False, True])
def test_pooling_of_window_logits(pooling, pair):
    model = classifier(window_pooling=pooling)
    texts = (tf.constant(QUESTIONS), tf.constant(TEXTS)) if pair else tf.constant(TEXTS)
    per_window = window_logits(model, texts)
    assert max(len(logits) for logits in per_window) > 2
    expected = np.stack([logits.mean(0) if pooling == "mean" else logits.max(0) for logits in per_window])
    np.testing.assert_allclose(model(model.pack_text(texts)), expected, atol=TOLERANCE)
    if pooling == "max" and not pair:  # predict: one answer per document, across batches of other window counts
        np.testing.assert_allclose(model.predict(np.array(TEXTS), batch_size=2, verbose=0), expected, atol=TOLERANCE)


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_texts_that_fit_one_window_answer_as_without_windows(pooling):
    model = classifier(window_pooling=pooling, doc_stride=3)
    plain = BertClassifier(model.encoder, 3, preprocessor=model.preprocessor)
    plain.logits.set_weights(model.logits.get_weights())
    for x in (tf.constant(SHORT), (tf.constant(SHORT), tf.constant(SHORT[::-1]))):
        np.testing.assert_allclose(model(model.pack_text(x)), plain(plain.preprocessor(x)), atol=1e-6)


@pytest.mark.slow
def test_max_pooling_loss_is_per_document():
    model = classifier(window_pooling="max", dropout=0.0)
    model.compile()
    labels = np.array([0, 1, 2, 1, 0])
    pooled = np.stack([logits.max(0) for logits in window_logits(model, tf.constant(TEXTS))])
    log_probabilities = pooled - np.log(np.exp(pooled).sum(-1, keepdims=True))
    expected = -log_probabilities[np.arange(len(labels)), labels].mean()
    loss, _ = model.evaluate(np.array(TEXTS), labels, batch_size=len(TEXTS), verbose=0)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def keyword_documents(count, seed):
    """24 filler words; label 1 documents hold "paris" past the first window."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for index in range(count):
        words = list(rng.choice(["the", "a"], 24))
        if index % 2:
            words[rng.integers(6, 24)] = "paris"
        texts.append(" ".join(words))
        labels.append(index % 2)
    return np.array(texts), np.array(labels)


@pytest.mark.slow
def test_max_pooling_learns_evidence_in_one_window():
    """Truncation never sees the keyword; windows with max pooling learn it."""
    x, y = keyword_documents(64, 0)
    test_x, test_y = keyword_documents(64, 1)
    accuracy = {}
    for doc_stride in (None, 6):
        model = BertClassifier(
            tiny_encoder(config=ONE_LAYER_TINY),
            num_classes=2,
            dropout=0.0,
            preprocessor=tiny_preprocessor(seq_length=8, max_seq_length=8),
            doc_stride=doc_stride,
            window_pooling="max",
        )
        model.compile(optimizer=keras.optimizers.Adam(3e-3))
        # windows reach 1.0 by epoch 15 (0.5 at 10), truncation stays near 0.5 through 40
        model.fit(model.preprocessed_dataset(x, y, batch_size=16).cache(), epochs=25, verbose=0)
        accuracy[doc_stride] = model.evaluate(test_x, test_y, verbose=0)[1]
    assert accuracy[6] >= 0.95
    assert accuracy[None] <= 0.7


def test_windows_are_configuration(tmp_path):
    model = classifier(doc_stride=5, window_pooling="max", max_windows=9)
    config = model.get_config()
    assert (config["doc_stride"], config["window_pooling"], config["max_windows"]) == (5, "max", 9)
    model.save(tmp_path / "model.keras")
    assert keras.saving.load_model(tmp_path / "model.keras").get_config() == config
    other = BertClassifier.from_checkpoint(tmp_path / "model.keras", doc_stride=7, window_pooling="mean")
    assert (other.doc_stride, other.window_pooling, other.max_windows) == (7, "mean", 9)
    model.save_checkpoint(tmp_path / "hf")
    loaded = BertClassifier.from_checkpoint(tmp_path / "hf", max_seq_length=16, doc_stride=5, window_pooling="max")
    texts = tf.constant(TEXTS)
    np.testing.assert_allclose(loaded(loaded.pack_text(texts)), model(model.pack_text(texts)), atol=TOLERANCE)
    with pytest.raises(ValueError, match="XLA"):
        model.compile(jit_compile=True)
    model.compile()
    assert model.jit_compile is False
    for bad in ({"doc_stride": 0}, {"max_windows": 2}, {"doc_stride": 4, "window_pooling": "sum"}):
        with pytest.raises(ValueError, match="doc_stride|max_windows|window_pooling"):
            classifier(**{"doc_stride": None, **bad})


@pytest.mark.slow
@pytest.mark.parametrize("pair", [False, True])
def test_served_documents_equal_predict(tmp_path, pair):
    model = classifier(window_pooling="max")
    x = (np.array(QUESTIONS), np.array(TEXTS)) if pair else np.array(TEXTS)
    request = {"text_a": QUESTIONS, "text_b": TEXTS} if pair else {"text": TEXTS}

    def check(model, out):
        np.testing.assert_allclose(out["logits"], model.predict(x, verbose=0), atol=TOLERANCE)

    def check_bound(predictor):
        longer = {name: [" ".join(texts[-2:])] for name, texts in request.items()}
        with pytest.raises(ServingError, match=f"(?s)INVALID_ARGUMENT.*max_windows={most} "):
            predictor.predict_texts(**longer)
        huge = {name: [texts[-2] * 100] for name, texts in request.items()}
        with pytest.raises(ServingError, match="(?s)INVALID_ARGUMENT.*bytes max_windows"):
            predictor.predict_texts(**huge)

    texts = tuple(tf.constant(column) for column in x) if pair else tf.constant(x)
    most = int(tf.reduce_max(preprocess_windows(model.preprocessor, texts, 6).starts.row_lengths()))
    path = run_task_test(
        model,
        tmp_path,
        x,
        request,
        check,
        fit_data=None if pair else (x, np.array([0, 1, 2, 1, 0])),
        export_kwargs={"max_windows": most},
        check_served=check_bound,
    )
    assert describe_signatures(path)["serve_ids"]["inputs"]["input_word_ids"] == ["int32", [-1, -1, -1]]


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embedder_averages_window_vectors_weighted_by_tokens(pooling):
    embedder = BertTextEmbedder(
        tiny_encoder(config=ONE_LAYER_TINY),
        pooling=pooling,
        preprocessor=tiny_preprocessor(max_seq_length=16),
        doc_stride=6,
    )
    plain = BertTextEmbedder(embedder.encoder, pooling=pooling, normalize=False, preprocessor=embedder.preprocessor)
    windows = preprocess_windows(embedder.preprocessor, tf.constant(TEXTS), 6)
    expected = []
    for row, count in enumerate(windows.starts.row_lengths().numpy()):
        inputs = {name: value[row, :count] for name, value in windows.inputs.items()}
        vectors = plain(inputs).numpy()
        tokens = inputs["input_mask"].numpy().sum(-1, keepdims=True)
        document = (vectors * tokens).sum(0) / tokens.sum()
        expected.append(document / np.linalg.norm(document))
    np.testing.assert_allclose(embedder.encode(TEXTS, batch_size=2), np.stack(expected), atol=TOLERANCE)
    short = ["the quick brown fox", "a good film", ""]
    np.testing.assert_allclose(
        embedder.encode(short),
        BertTextEmbedder(embedder.encoder, pooling=pooling, preprocessor=embedder.preprocessor).encode(short),
        atol=1e-6,
    )


@pytest.mark.parametrize("format", ["litert", "onnx"])
def test_portable_exports_refuse_windows(tmp_path, format):
    from bert_keras.serving import deploy

    model = classifier()
    with pytest.raises(ValueError, match="reads one window a text.*doc_stride=6"):
        deploy.export_checked(format, model, model.preprocessor, tmp_path / f"model.{format}")


def test_fit_without_windows_says_what_truncation_cuts(monkeypatch):
    class Reached(Exception):
        pass

    def stop(*args, **kwargs):
        raise Reached

    for doc_stride in (None, 6):
        model = classifier(doc_stride=doc_stride)
        monkeypatch.setattr(model, "preprocessed_dataset", stop)
        with warnings.catch_warnings(record=True) as caught, pytest.raises(Reached):
            warnings.simplefilter("always")
            model.fit(np.array(TEXTS), np.zeros(len(TEXTS)))
        notices = [str(warning.message) for warning in caught if "truncation" in str(warning.message)]
        expected = truncation_notice(model.preprocessor, np.array(TEXTS), "training examples")
        assert notices == ([expected] if doc_stride is None else [])
        assert expected.startswith("truncation: 2 of 5 training examples are longer than 16 tokens")


@pytest.mark.slow
def test_predict_past_max_windows_names_the_bound():
    model = classifier(max_windows=3)
    assert len(model.predict(np.array(SHORT), verbose=0)) == len(SHORT)  # within the bound
    with pytest.raises(ValueError, match=r"BertClassifier: a document needs more than max_windows=3 windows"):
        model.predict(np.array(TEXTS), batch_size=2, verbose=0)


@pytest.mark.slow
def test_predict_on_raw_text_traces_the_preprocessing_once():
    """Each `predict` on raw text builds a new dataset; its preprocessing is traced once,
    and the tokenizer once for training on `(x, y)` and predicting on `x`."""
    from bert_keras.tasks.task import preprocess_function

    model = classifier()
    first = model.predict(np.array(TEXTS), batch_size=2, verbose=0)
    second = model.predict(np.array(TEXTS), batch_size=2, verbose=0)
    np.testing.assert_array_equal(first, second)
    assert preprocess_function(model).experimental_get_tracing_count() == 1
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(np.array(TEXTS), np.zeros(len(TEXTS)), batch_size=2, epochs=1, verbose=0)
    assert preprocess_function(model).experimental_get_tracing_count() == 2  # (x,) and (x, y)
    assert preprocess_function(model).pack_text.experimental_get_tracing_count() == 1

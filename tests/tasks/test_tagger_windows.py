"""`BertTokenClassifier` on long texts: run_squad's windows, each piece tagged from the
window where it has the most context (checked against run_squad's own Python on the
same per-window logits), texts of one window exactly as without windows, `tag`."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, require
from harness import run_task_test
from run_squad_reference import check_is_max_context, run_squad_spans

from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.serving.tfserving.session import ServingError
from bert_keras.tasks.token_classifier import IGNORE_LABEL, BertTokenClassifier, document_logits

TINY = BertConfig(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
WORDS = (
    "Peter Blackburn said the European Commission in Brussels on Thursday disagreed with German advice "
    "to consumers to shun British lamb until scientists determine whether mad cow disease can be "
    "transmitted to sheep , Germany 's representative to the unaffable EU 's veterinary committee said"
).split()
SEQ = 16  # windows of 14 pieces


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")))


def taggers(tokenizer, doc_stride, seq_length=None, num_classes=5):
    """A tagger without windows and one with, sharing every weight."""
    preprocessor = BertPreprocessor(tokenizer, seq_length=seq_length, max_seq_length=SEQ)
    plain = BertTokenClassifier(
        BertEncoder(TINY), num_classes, preprocessor=preprocessor, labels=list("OABCD")[:num_classes]
    )
    windowed = BertTokenClassifier(
        plain.encoder, num_classes, preprocessor=preprocessor, doc_stride=doc_stride, labels=plain.labels
    )
    windowed.logits.set_weights(plain.logits.get_weights())
    return plain, windowed


@pytest.mark.slow
@pytest.mark.parametrize("seq_length", [None, SEQ])
def test_a_text_of_one_window_gets_exactly_the_outputs_without_windows(tokenizer, seq_length):
    plain, windowed = taggers(tokenizer, doc_stride=4, seq_length=seq_length)
    words = tf.ragged.constant([["EU", "rejects", "unaffable", "call"], ["Hello"], []])
    expected = plain.predict(words, verbose=0)
    np.testing.assert_allclose(windowed.predict(words, verbose=0), expected, atol=1e-6)
    assert windowed.word_start_positions(words)[1].to_list() == plain.word_start_positions(words)[1].to_list()
    labels = tf.ragged.constant([[1, 0, 2, 0], [3], []])
    plain.compile()
    windowed.compile()
    assert windowed.evaluate(words, labels, verbose=0) == pytest.approx(plain.evaluate(words, labels, verbose=0))
    np.testing.assert_array_equal(
        windowed.preprocess_samples(words, labels)[1], plain.preprocess_samples(words, labels)[1]
    )


def run_squad_document_logits(model, tokenizer, words, doc_stride):
    """Per piece of `words`, the logits of its max-context window, by run_squad's Python:
    its doc spans and `_check_is_max_context`, each window run on its own."""
    pieces = [p for word in tokenizer(tf.constant(words)).to_list() for p in word]
    spans = run_squad_spans(len(pieces), SEQ - 2, doc_stride)
    window_logits = []
    for start, length in spans:
        window = [tokenizer.cls_id, *pieces[start : start + length], tokenizer.sep_id]
        inputs = {
            "input_word_ids": tf.constant([window]),
            "input_mask": tf.ones([1, len(window)], tf.int32),
            "input_type_ids": tf.zeros([1, len(window)], tf.int32),
        }
        window_logits.append(model(inputs).numpy()[0])
    rows = []
    for position in range(len(pieces)):
        for number, (start, length) in enumerate(spans):
            if start <= position < start + length and check_is_max_context(spans, number, position):
                rows.append(window_logits[number][position - start + 1])
    return np.array(rows), spans


@pytest.mark.slow
@pytest.mark.parametrize("doc_stride", [3, 20])  # overlapping windows; windows end to end
def test_each_piece_of_a_long_text_is_tagged_from_its_max_context_window(tokenizer, doc_stride):
    plain, windowed = taggers(tokenizer, doc_stride=doc_stride)
    expected, spans = run_squad_document_logits(plain, tokenizer, WORDS, doc_stride)
    assert len(spans) > 2
    short = WORDS[:3]
    logits = windowed.predict(tf.ragged.constant([WORDS, short]), verbose=0)
    np.testing.assert_allclose(logits[0, 1 : 1 + len(expected)], expected, atol=1e-5)
    # The short text in the same batch still gets its own logits.
    length = 2 + len(run_squad_document_logits(plain, tokenizer, short, doc_stride)[0])
    np.testing.assert_allclose(
        logits[1, :length], plain.predict(tf.ragged.constant([short]), verbose=0)[0, :length], atol=1e-5
    )
    # Every word is tagged: the argmax at its first piece.
    _, positions = windowed.word_start_positions(tf.ragged.constant([WORDS]))
    first = np.array(positions.to_list()[0])
    assert (first > 0).all()
    tags = windowed.tag(WORDS)
    assert tags == [windowed.labels[i] for i in expected[first - 1].argmax(-1)]
    assert windowed.tag([WORDS, short]) == [tags, windowed.tag(short)]


def test_tag_gives_one_tag_per_word_of_any_length(tokenizer):
    plain, _ = taggers(tokenizer, doc_stride=5)
    long_text = WORDS * 3  # about 150 pieces in windows of 14
    tags = plain.tag(long_text)
    assert len(tags) == len(long_text) and set(tags) <= set(plain.labels)
    # Without a doc_stride, tag() reads long texts in windows half a window apart.
    expected, _ = run_squad_document_logits(plain, tokenizer, long_text, (SEQ - 2) // 2)
    _, positions = plain.word_start_positions(tf.ragged.constant([long_text]))
    assert plain.tag(long_text[:5]) == tags[:5] or len(plain.tag(long_text[:5])) == 5
    pieces = tokenizer(tf.constant(long_text)).row_lengths().numpy()
    first = np.cumsum(pieces) - pieces
    assert tags == [plain.labels[i] for i in expected[first].argmax(-1)]
    assert plain.tag([]) == [] and plain.tag([[], ["EU"]])[0] == []
    # While predict on the plain model still truncates: words past the cut are not tagged.
    assert min(positions.to_list()[0]) == -1


@pytest.mark.slow
def test_training_labels_each_word_in_its_max_context_window_only(tokenizer):
    _, windowed = taggers(tokenizer, doc_stride=4, num_classes=3)
    windowed.compile()
    labels = [[i % 3 for i in range(len(WORDS))]]
    inputs, targets = windowed.preprocess_samples(tf.ragged.constant([WORDS]), tf.ragged.constant(labels))
    num_pieces = int(tokenizer(tf.constant(WORDS)).row_lengths().numpy().sum())
    assert inputs["input_word_ids"].shape[:2] == (1, len(run_squad_spans(num_pieces, SEQ - 2, 4)))
    logits = windowed(inputs).numpy()
    targets = targets.numpy()
    assert logits.shape[:2] == targets.shape
    # Each word's label once, at its first piece in document positions.
    rows, cols = np.nonzero(targets != IGNORE_LABEL)
    assert targets[rows, cols].tolist() == labels[0]
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_probabilities[rows, cols, targets[rows, cols]].mean()
    data = tf.ragged.constant([WORDS]), tf.ragged.constant(labels)
    assert windowed.evaluate(*data, verbose=0) == pytest.approx(expected, rel=1e-5)
    assert np.isfinite(windowed.fit(*data, verbose=0).history["loss"][0])
    # The loss reaches each piece's max-context window only (run_squad's rule): the
    # gradient of the documents' piece logits with respect to the windows' logits.
    window_logits = tf.Variable(tf.random.normal(list(inputs["input_mask"].shape) + [3]))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(document_logits(window_logits, inputs, 4)[:, 1 : 1 + num_pieces])
    reached = tape.gradient(total, window_logits).numpy()[0, :, :, 0] != 0
    spans = run_squad_spans(num_pieces, SEQ - 2, 4)
    max_context = np.zeros_like(reached)
    for number, (start, length) in enumerate(spans):
        for position in range(start, start + length):
            max_context[number, position - start + 1] = check_is_max_context(spans, number, position)
    np.testing.assert_array_equal(reached, max_context)


@pytest.mark.slow
def test_config_round_trip_and_checks(tokenizer, tmp_path):
    _, windowed = taggers(tokenizer, doc_stride=6)
    config = windowed.get_config()
    assert (config["doc_stride"], config["max_windows"]) == (6, None)
    path = tmp_path / "tagger.keras"
    windowed.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.doc_stride == 6 and loaded.tag(WORDS) == windowed.tag(WORDS)
    with pytest.raises(ValueError, match="doc_stride must be a positive integer"):
        BertTokenClassifier(BertEncoder(TINY), 3, doc_stride=0)
    bounded = BertTokenClassifier(windowed.encoder, 5, preprocessor=windowed.preprocessor, doc_stride=6, max_windows=2)
    with pytest.raises(ValueError, match="BertTokenClassifier: a document needs more than max_windows=2 windows"):
        bounded.predict(tf.ragged.constant([WORDS]), verbose=0)


@pytest.mark.slow
def test_served_documents_are_tagged_as_predict_tags_them(tokenizer, tmp_path):
    _, model = taggers(tokenizer, doc_stride=5)
    texts = [" ".join(WORDS), "EU rejects German call", ""]
    words = tf.ragged.constant([text.split() for text in texts], dtype=tf.string)
    pieces = int(tokenizer(tf.constant(WORDS)).row_lengths().numpy().sum())
    most = len(run_squad_spans(pieces, SEQ - 2, 5))

    def check(model, out):
        served = [[w.decode() for w in row[:n]] for row, n in zip(out["words"], out["num_words"])]
        assert served[0] == [w for w in re.split(r"(\W)", texts[0]) if w.strip()]  # "'s": "'" and "s"
        for row, row_words in enumerate(served):
            assert [t.decode() for t in out["tags"][row, : len(row_words)]] == model.tag(row_words)
        logits = model.predict(tf.ragged.constant(served, dtype=tf.string), verbose=0)
        positions = model.word_start_positions(tf.ragged.constant(served, dtype=tf.string))[1].to_list()
        for row, row_positions in enumerate(positions):
            probabilities = softmax(logits[row, row_positions])
            assert out["tag_ids"][row, : len(row_positions)].tolist() == probabilities.argmax(-1).tolist()
            np.testing.assert_allclose(
                out["tag_probabilities"][row, : len(row_positions)], probabilities.max(-1), atol=1e-5
            )

    def check_bound(predictor):
        with pytest.raises(ServingError, match=f"(?s)INVALID_ARGUMENT.*max_windows={most}"):
            predictor.predict_texts(text=[texts[0] + " more words"])

    labels = tf.ragged.constant([[i % 5 for i in range(len(row))] for row in words.to_list()])
    run_task_test(model, tmp_path, words, {"text": texts}, check, (words, labels), {"max_windows": most}, check_bound)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

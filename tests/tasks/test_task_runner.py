"""Every head through the shared task runner (`harness.run_task_test`): fit on raw text,
predict, `.keras` round trip, and an export answering raw-text requests through the TF1
session loader equal to the Keras model within 1e-5, behind the TF Serving op gate."""

import numpy as np
import pytest
import tensorflow as tf
from harness import (
    ONE_LAYER_TINY,
    TOLERANCE,
    assert_outputs_close,
    run_task_test,
    tiny_encoder,
    tiny_preprocessor,
)

from bert_keras import (
    BertClassifier,
    BertFeatureExtractor,
    BertMultipleChoice,
    BertSpanLabeler,
    BertTokenClassifier,
)
from bert_keras.serving.tfserving.session import ServingError
from bert_keras.tasks.multiple_choice import pack_choices

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

TEXTS = ["the quick brown fox jumps over the lazy dog", "a good film", "", "who did go home ?", "中文 , paris !"]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_classifier(tmp_path):
    model = BertClassifier(tiny_encoder(config=ONE_LAYER_TINY), num_classes=3, preprocessor=tiny_preprocessor())
    labels = ["neg", "neutral", "pos"]

    def check(model, out):
        logits = model(model.preprocessor(tf.constant(TEXTS))).numpy()
        np.testing.assert_allclose(out["logits"], logits, atol=TOLERANCE)
        np.testing.assert_allclose(out["probabilities"], softmax(logits), atol=TOLERANCE)
        assert out["label_ids"].tolist() == logits.argmax(-1).tolist()
        assert [label.decode() for label in out["labels"]] == [labels[i] for i in logits.argmax(-1)]

    run_task_test(
        model,
        tmp_path,
        np.array(TEXTS),
        {"text": TEXTS},
        check,
        fit_data=(np.array(TEXTS), np.array([0, 1, 2, 1, 0])),
        export_kwargs={"labels": labels},
    )


def test_token_classifier(tmp_path):
    model = BertTokenClassifier(tiny_encoder(config=ONE_LAYER_TINY), num_classes=3, preprocessor=tiny_preprocessor())
    words = tf.ragged.constant([text.split() for text in TEXTS[:2]] + [["john"]])
    tags = tf.ragged.constant([[0, 1, 2, 0, 0, 0, 0, 0, 2], [0, 0, 1], [1]])
    texts = ["the quick brown fox jumps", "john lives in paris ."]

    def check(model, out):
        # The words of these texts are whole vocabulary entries except "jumps" (jump ##s).
        expected_words = [text.split() for text in texts]
        assert out["num_words"].tolist() == [len(w) for w in expected_words]
        packed = model.preprocessor(tf.constant(texts))
        logits = model(packed).numpy()
        for row, row_words in enumerate(expected_words):
            assert [w.decode() for w in out["words"][row, : len(row_words)]] == row_words
            pieces = [model.preprocessor.tokenizer.id_to_token(int(i)) for i in packed["input_word_ids"][row]]
            first = [
                p for p in range(1, int(packed["input_mask"][row].numpy().sum()) - 1) if not pieces[p].startswith("##")
            ]
            probabilities = softmax(logits[row, first])
            assert out["tag_ids"][row, : len(first)].tolist() == probabilities.argmax(-1).tolist()
            np.testing.assert_allclose(
                out["tag_probabilities"][row, : len(first)], probabilities.max(-1), atol=TOLERANCE
            )

    run_task_test(model, tmp_path, words, {"text": texts}, check, fit_data=(words, tags))


def test_span_labeler(tmp_path):
    model = BertSpanLabeler(tiny_encoder(config=ONE_LAYER_TINY), preprocessor=tiny_preprocessor())
    questions, contexts = ["who lives in paris ?", "where did john go ?"], ["john lives in paris .", "john did go home"]
    targets = {"start_logits": np.array([5, 8]), "end_logits": np.array([5, 9])}

    def check(model, out):
        packed = model.preprocessor((tf.constant(questions), tf.constant(contexts)))
        logits = model(packed)
        start, end = logits["start_logits"].numpy(), logits["end_logits"].numpy()
        np.testing.assert_allclose(out["no_answer_score"], start[:, 0] + end[:, 0], atol=TOLERANCE)
        for row in range(len(questions)):
            context = np.flatnonzero(packed["input_type_ids"][row].numpy())[:-1]  # without the last [SEP]
            best = max(start[row, s] + end[row, e] for s in context for e in context if 0 <= e - s < 30)
            np.testing.assert_allclose(out["score"][row], best, atol=TOLERANCE)
            answer = contexts[row].encode()[out["answer_start_byte"][row] : out["answer_end_byte"][row]]
            assert out["answer"][row] == answer and answer

    run_task_test(
        model,
        tmp_path,
        (np.array(questions), np.array(contexts)),
        {"question": questions, "context": contexts},
        check,
        fit_data=((np.array(questions), np.array(contexts)), targets),
    )


def test_multiple_choice(tmp_path):
    """Request layout: `question` [batch] + `choices` [batch, num_choices] strings; one
    score per choice and the chosen index out."""
    model = BertMultipleChoice(tiny_encoder(config=ONE_LAYER_TINY), preprocessor=tiny_preprocessor())
    questions = np.array(["the quick brown fox", "who did go home ?"])
    choices = np.array([["jumps over the dog", "is lazy", "a cat"], ["john", "the fox", "paris"]])

    def check(model, out):
        scores = model(pack_choices(model.preprocessor, (tf.constant(questions), tf.constant(choices)))).numpy()
        assert out["scores"].shape == (2, 3)
        np.testing.assert_allclose(out["scores"], scores, atol=TOLERANCE)
        np.testing.assert_allclose(out["probabilities"], softmax(scores), atol=TOLERANCE)
        assert out["choice"].tolist() == scores.argmax(-1).tolist()

    def check_shapes(predictor):
        with pytest.raises(ServingError, match="INVALID_ARGUMENT.*choices must have rank 2"):
            predictor.predict_texts(question=["a"], choices=["a", "b"])
        with pytest.raises(ServingError, match="INVALID_ARGUMENT"):  # 2 questions, 1 row of choices
            predictor.predict_texts(question=["a", "b"], choices=[["a", "b"]])
        empty = predictor.predict_texts(question=np.array([], dtype=bytes), choices=np.zeros((0, 3), dtype=bytes))
        assert empty["scores"].shape == (0, 3) and empty["choice"].shape == (0,)

    path = run_task_test(
        model,
        tmp_path,
        (questions, choices),
        {"question": questions, "choices": choices},
        check,
        fit_data=((questions, choices), np.array([0, 2])),
        check_served=check_shapes,
    )
    from bert_keras.serving.export import describe_signatures

    inputs = describe_signatures(path)["serving_default"]["inputs"]
    assert inputs == {"question": ["string", [-1]], "choices": ["string", [-1, -1]]}
    assert describe_signatures(path)["serve_ids"]["inputs"]["input_word_ids"] == ["int32", [-1, -1, -1]]


@pytest.mark.parametrize("combine, pooling", [("concat", "mean"), ("stack", "cls")])
def test_feature_extractor(tmp_path, combine, pooling):
    """Strings in; the chosen layers' token features and the sentence vectors out (two
    layers: the other heads read one)."""
    model = BertFeatureExtractor(
        tiny_encoder(), layers=(-1, 0), combine=combine, pooling=pooling, preprocessor=tiny_preprocessor()
    )

    def check(model, out):
        expected = model(model.preprocessor(tf.constant(TEXTS)))
        mask = expected["input_mask"].numpy()
        np.testing.assert_array_equal(out["input_mask"], mask)
        np.testing.assert_allclose(out["sentence_features"], expected["sentence_features"], atol=TOLERANCE)
        keep = mask.reshape(mask.shape + (1,) * (expected["token_features"].shape.rank - 2))
        assert_outputs_close(out["token_features"] * keep, expected["token_features"].numpy() * keep)

    run_task_test(model, tmp_path, np.array(TEXTS), {"text": TEXTS}, check)

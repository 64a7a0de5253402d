"""A user's subclass of a head answers as its base everywhere the head's kind matters:
predict's records, the SavedModel export predict reads back, and MediaPipe's metadata."""

import json

import keras
import numpy as np
import pytest
from harness import tiny_encoder, tiny_preprocessor

from bert_keras import (
    BertClassifier,
    BertMultipleChoice,
    BertPretrainer,
    BertReranker,
    BertSpanLabeler,
    BertTextEmbedder,
    BertTokenClassifier,
)
from bert_keras.serving import mediapipe_metadata
from bert_keras.serving.batch import PredictOptions, SavedModelPredictor, predict_files
from bert_keras.serving.batch.records import head_kind
from bert_keras.serving.export import export_for_serving, serving_preprocessor
from bert_keras.serving.serving_tasks import serving_signature
from bert_keras.tasks.feature_extractor import BertFeatureExtractor

TEXTS = ["the quick brown fox", "", "a dog in paris , france", "berlin is a city in europe"]
LABELS = ["negative", "neutral", "positive"]


@keras.saving.register_keras_serializable(package="user_heads")
class MyClassifier(BertClassifier):
    pass


@keras.saving.register_keras_serializable(package="user_heads")
class MyEmbedder(BertTextEmbedder):
    pass


# The kinds predict writes in its errors and records, the reference each head must answer.
HEADS = [
    (BertClassifier, dict(num_classes=3), "classifier"),
    (BertClassifier, dict(num_classes=3, multi_label=True), "multi-label"),
    (BertClassifier, dict(num_classes=1), "regression"),
    (BertReranker, {}, "reranker"),
    (BertTextEmbedder, {}, "embedder"),
    (BertTokenClassifier, dict(num_classes=3), "tagger"),
    (BertSpanLabeler, {}, "span"),
    (BertMultipleChoice, {}, "multiple-choice"),
    (BertPretrainer, {}, "fill-mask"),
]


@pytest.mark.parametrize("base, arguments, kind", HEADS, ids=[kind for _, _, kind in HEADS])
def test_a_subclass_of_each_head_is_predicted_as_its_base(base, arguments, kind):
    subclass = type(f"My{base.__name__}", (base,), {})
    assert head_kind(base(tiny_encoder(), **arguments)) == kind
    assert head_kind(subclass(tiny_encoder(), **arguments)) == kind
    signature = type(serving_signature(subclass(tiny_encoder(), **arguments), tiny_preprocessor()))
    assert signature is type(serving_signature(base(tiny_encoder(), **arguments), tiny_preprocessor()))


def test_a_model_without_a_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="predict does not answer for a BertFeatureExtractor"):
        head_kind(BertFeatureExtractor(tiny_encoder(), layers=[-1]))


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_a_subclass_s_file_and_export_give_its_base_s_records(tmp_path):
    mine = MyClassifier(tiny_encoder(), num_classes=3, labels=LABELS, preprocessor=tiny_preprocessor())
    base = BertClassifier.from_config(mine.get_config())
    base.set_weights(mine.get_weights())
    mine.save(tmp_path / "mine.keras")
    texts = tmp_path / "in.txt"
    texts.write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    predict_files(str(tmp_path / "mine.keras"), [str(texts)], tmp_path / "mine.jsonl", PredictOptions(all_scores=True))
    predict_files(base, [str(texts)], tmp_path / "base.jsonl", PredictOptions(all_scores=True))
    expected = read_jsonl(tmp_path / "base.jsonl")
    assert [r["label"] for r in expected] == [LABELS[i] for i in base.predict(TEXTS, verbose=0).argmax(-1)]
    assert read_jsonl(tmp_path / "mine.jsonl") == expected

    export = export_for_serving(mine, serving_preprocessor(mine), tmp_path / "export", warmup_texts=None)
    assert (export / "assets.extra" / "head_kind.txt").read_text() == "classifier\n"
    assert SavedModelPredictor(export).kind == "classifier"
    predict_files(str(export), [str(texts)], tmp_path / "export.jsonl", PredictOptions(all_scores=True))
    exported = read_jsonl(tmp_path / "export.jsonl")
    assert [r["label"] for r in exported] == [r["label"] for r in expected]
    scores = [[list(r["scores"].values()) for r in records] for records in (exported, expected)]
    np.testing.assert_allclose(*scores, atol=1e-5, rtol=0)
    # An export written before the kind was recorded is still told by its outputs.
    (export / "assets.extra" / "head_kind.txt").unlink()
    assert SavedModelPredictor(export).kind == "classifier"


@pytest.mark.slow
def test_an_unknown_recorded_kind_is_refused_naming_the_export(tmp_path):
    model = BertClassifier(tiny_encoder(), num_classes=2, preprocessor=tiny_preprocessor())
    export = export_for_serving(model, serving_preprocessor(model), tmp_path / "export", warmup_texts=None)
    (export / "assets.extra" / "head_kind.txt").write_text("sentiment\n")
    with pytest.raises(ValueError, match=f"{tmp_path / 'export'}: an export of outputs .* predict does not decode"):
        SavedModelPredictor(tmp_path / "export")


@pytest.mark.slow
def test_mediapipe_exports_a_subclass_as_its_base(tmp_path):
    classifier = MyClassifier(tiny_encoder(), num_classes=3, labels=LABELS)
    difference, names = mediapipe_metadata.export_checked(classifier, tiny_preprocessor(), tmp_path / "c.tflite")
    assert names == LABELS and difference <= 1e-4
    embedder = MyEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor())
    difference, names = mediapipe_metadata.export_checked(embedder, tiny_preprocessor(), tmp_path / "e.tflite")
    assert names is None and difference <= 1e-4

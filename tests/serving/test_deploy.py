"""LiteRT and ONNX exports, run by ai-edge-litert's interpreter and ONNX Runtime, against Keras.

Every head with a serving signature is exported to both formats and must answer within
1e-4 of the Keras model; LiteRT's in-graph tokenizer must give the original BERT
tokenizer's ids (../shared/reference) on every text it accepts and refuse the others.
"""

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from harness import TINY, VOCAB, tiny_encoder, tiny_preprocessor

from bert_keras import (
    BertClassifier,
    BertEncoder,
    BertFeatureExtractor,
    BertMultipleChoice,
    BertPretrainer,
    BertSpanLabeler,
    BertTextEmbedder,
    BertTokenClassifier,
)
from bert_keras.serving import deploy, portable

TEXTS = ["the quick brown fox jumps over the lazy dog.", "", "who did go home, john?", "a good film!"]


def heads():
    """name -> (model, whether LiteRT takes its raw text)."""
    return {
        "encoder": lambda: (tiny_encoder(), True),
        "classifier": lambda: (BertClassifier(tiny_encoder(), num_classes=3, labels=["a", "b", "c"]), True),
        "pair_classifier": lambda: (
            BertClassifier(tiny_encoder(), num_classes=2, segments=("text_a", "text_b")),
            True,
        ),
        "regression": lambda: (BertClassifier(tiny_encoder(), num_classes=1), True),
        "features": lambda: (BertFeatureExtractor(tiny_encoder(), layers=(-1, -2)), True),
        "embedder": lambda: (BertTextEmbedder(tiny_encoder()), True),
        "tagger": lambda: (BertTokenClassifier(tiny_encoder(), num_classes=4), False),
        "spans": lambda: (BertSpanLabeler(tiny_encoder()), False),
        "multiple_choice": lambda: (BertMultipleChoice(tiny_encoder()), False),
    }


@pytest.mark.slow  # 18 conversions, ~5 s each
@pytest.mark.parametrize("name", sorted(heads()))
@pytest.mark.parametrize("format", deploy.FORMATS)
def test_float32_exports_equal_keras(name, format, tmp_path):
    model, text = heads()[name]()
    preprocessor = tiny_preprocessor()
    path = tmp_path / f"model.{'tflite' if format == 'litert' else 'onnx'}"
    if format == "litert":
        assert deploy.export_litert(model, preprocessor, path) == text
    else:
        deploy.export_onnx(model, preprocessor, path)
    assert path.with_suffix(".vocab.txt").read_text(encoding="utf-8").splitlines() == VOCAB
    differences = deploy.check_export(format, path, model, preprocessor, texts=TEXTS)
    assert differences and max(differences.values()) <= deploy.TOLERANCE, differences


@pytest.mark.parametrize(("format", "quantize"), [("litert", "int8"), ("litert", "float16"), ("onnx", "int8")])
def test_quantized_exports_run_and_shrink(format, quantize, tmp_path):
    """Quantized exports of a model whose matrices are big enough to quantize: smaller
    files, outputs close to float32 (the accuracy cost on SST-2 is in bench_deploy.py). Ids
    in, so that the tokenizer's tables do not weigh in the sizes."""
    encoder = BertEncoder(dataclasses.replace(TINY, hidden_size=64, intermediate_size=256))
    model = BertClassifier(encoder, num_classes=2, segments=("text_a", "text_b"))
    preprocessor = tiny_preprocessor()
    export = functools.partial(deploy.export_litert, text=False) if format == "litert" else deploy.export_onnx
    suffix = ".tflite" if format == "litert" else ".onnx"
    export(model, preprocessor, tmp_path / f"float32{suffix}")
    export(model, preprocessor, tmp_path / f"{quantize}{suffix}", quantize=quantize)
    float_size = (tmp_path / f"float32{suffix}").stat().st_size
    assert (tmp_path / f"{quantize}{suffix}").stat().st_size < (0.6 if quantize == "float16" else 0.5) * float_size
    differences = deploy.check_export(format, tmp_path / f"{quantize}{suffix}", model, preprocessor, texts=TEXTS)
    assert 0 < differences["probabilities"] < 0.05, differences


def test_unknown_quantization_and_missing_runtime_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="onnx exports quantize to int8, not 'float16'"):
        deploy.export_onnx(tiny_encoder(), tiny_preprocessor(), tmp_path / "m.onnx", quantize="float16")
    monkeypatch.setitem(__import__("sys").modules, "tf2onnx", None)
    with pytest.raises(portable.MissingRuntime, match=r"pip install 'bert-keras\[deploy\]'"):
        deploy.export_onnx(tiny_encoder(), tiny_preprocessor(), tmp_path / "m.onnx")


@pytest.mark.parametrize("format", deploy.FORMATS)
def test_fill_mask_is_savedmodel_only(format, tmp_path):
    export = deploy.export_litert if format == "litert" else deploy.export_onnx
    with pytest.raises(ValueError, match="fill-mask .* exports only as a SavedModel"):
        export(BertPretrainer(tiny_encoder()), tiny_preprocessor(), tmp_path / "m")


def test_litert_refuses_rather_than_answers_what_it_cannot_tokenize(tmp_path):
    model = BertClassifier(tiny_encoder(), num_classes=2)
    deploy.export_litert(model, tiny_preprocessor(), tmp_path / "m.tflite")
    runtime = deploy.predictor("litert", tmp_path / "m.tflite")
    texts = np.array(["the dog", deploy.REFUSED_TEXT], dtype=object)
    raw = runtime.interpreter.get_signature_runner("serving_default")(text=texts)
    assert raw[deploy.EXACTNESS_OUTPUT].tolist() == [True, False]
    assert np.isfinite(raw["probabilities"][0]).all() and np.isnan(raw["probabilities"][1]).all()
    assert raw["label_ids"][1] == -1
    assert tf.reduce_all(tf.math.is_finite(raw["logits"][0]))


def test_cli_exports_checks_and_explains(tmp_path, capsys):
    from bert_keras_cli.cli import main as cli

    fixture = str(Path(__file__).parents[1] / "fixtures" / "classifier_v0.keras")
    assert cli(["export", fixture, "--format", "onnx", "--quantize", "int8", "--out", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "exported BertClassifier to" in out and "(onnx, int8," in out and "packed ids" in out
    assert "largest difference from Keras: label_ids" in out
    assert (tmp_path / "m.vocab.txt").exists()
    assert cli(["export", fixture, "--quantize", "int8", "--out", str(tmp_path / "savedmodel")]) == 2
    assert "--quantize int8 is for --format litert|onnx" in capsys.readouterr().err
    assert not (tmp_path / "savedmodel").exists()

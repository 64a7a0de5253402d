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
from conftest import DATA, require
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


SUFFIX = {"litert": ".tflite", "onnx": ".onnx"}


@pytest.fixture(scope="module")
def float32_exports(tmp_path_factory):
    """`export(name, format)`: (model, whether LiteRT should take its text, path, whether the
    export took text) of a head's float32 export, converted once a module (the classifier's
    LiteRT file is also read by the refusal check)."""
    exports = {}

    def export(name, format):
        if (name, format) not in exports:
            model, text = heads()[name]()
            path = tmp_path_factory.mktemp(f"{name}-{format}") / f"model{SUFFIX[format]}"
            if format == "litert":
                took = deploy.export_litert(model, tiny_preprocessor(), path)
            else:
                took = deploy.export_onnx(model, tiny_preprocessor(), path)
            exports[name, format] = model, text, path, took
        return exports[name, format]

    return export


@pytest.mark.slow  # 18 conversions, ~5 s each
@pytest.mark.parametrize("name", sorted(heads()))
@pytest.mark.parametrize("format", deploy.FORMATS)
def test_float32_exports_equal_keras(name, format, float32_exports):
    model, text, path, took = float32_exports(name, format)
    if format == "litert":
        assert took == text
    assert path.with_suffix(".vocab.txt").read_text(encoding="utf-8").splitlines() == VOCAB
    differences = deploy.check_export(format, path, model, tiny_preprocessor(), texts=TEXTS)
    assert differences and max(differences.values()) <= deploy.TOLERANCE, differences
    if getattr(model, "labels", None):  # unasked, the export answers the model's own class names
        assert differences["labels"] == 0.0


@pytest.fixture(scope="module")
def quantizable(tmp_path_factory):
    """(model, `export(format, quantize=None)`): a model whose matrices are big enough to
    quantize, and the path of its export (ids in, so that the tokenizer's tables do not
    weigh in the sizes), converted once a module: the quantized cases share the float32 one."""
    encoder = BertEncoder(dataclasses.replace(TINY, hidden_size=64, intermediate_size=256))
    model = BertClassifier(encoder, num_classes=2, segments=("text_a", "text_b"))
    folder = tmp_path_factory.mktemp("quantizable")

    def export(format, quantize=None):
        path = folder / f"{quantize or 'float32'}{SUFFIX[format]}"
        if not path.exists():
            convert = functools.partial(deploy.export_litert, text=False) if format == "litert" else deploy.export_onnx
            convert(model, tiny_preprocessor(), path, quantize=quantize)
        return path

    return model, export


@pytest.mark.slow
@pytest.mark.parametrize(("format", "quantize"), [("litert", "int8"), ("litert", "float16"), ("onnx", "int8")])
def test_quantized_exports_run_and_shrink(format, quantize, quantizable):
    """Quantized exports: smaller files, outputs close to float32 (the accuracy cost on
    SST-2 is in bench_deploy.py)."""
    model, export = quantizable
    float_size = export(format).stat().st_size
    path = export(format, quantize)
    assert path.stat().st_size < (0.6 if quantize == "float16" else 0.5) * float_size
    differences = deploy.check_export(format, path, model, tiny_preprocessor(), texts=TEXTS)
    assert 0 < differences["probabilities"] < 0.05, differences


def sst2(split, rows):
    """(sentences, labels) of the first `rows` rows of SST-2's `split`.tsv."""
    lines = require(DATA / "glue" / "SST-2" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1 : rows + 1]
    return [line.split("\t")[0] for line in lines], np.array([int(line.split("\t")[1]) for line in lines])


# The int8 exports of all-MiniLM-L6-v2 against its float32 Keras model on 128 SST-2 dev sentences,
# measured: cosine of their embeddings at least 0.9975 (LiteRT) and 0.984 (ONNX), mean 0.9986 and
# 0.9915; the nearest-centroid sentiment class agreed on 99.2% and 94.5% of the sentences.
INT8_AGREEMENT = {"litert": (0.99, 0.995, 0.97), "onnx": (0.975, 0.985, 0.92)}  # least, mean cosine; class


@pytest.fixture(scope="module")
def minilm_sst2(minilm_dir):
    """all-MiniLM-L6-v2's Keras model, 128 SST-2 dev sentences, its float32 embeddings of
    them and the two sentiment centroids of its embeddings of 200 training sentences."""
    model = BertTextEmbedder.from_checkpoint(minilm_dir, max_seq_length=128)
    texts, _ = sst2("dev", 128)
    training, labels = sst2("train", 200)
    trained = model.predict(training, verbose=0)
    centroids = np.stack([trained[labels == label].mean(0) for label in (0, 1)])
    return model, texts, model.predict(texts, verbose=0), centroids


@pytest.mark.slow  # two int8 conversions of a real 6-layer model, ~40 s each
@pytest.mark.parametrize("format", deploy.FORMATS)
def test_int8_exports_of_a_real_model_agree_with_float_on_real_text(format, minilm_sst2, tmp_path):
    """all-MiniLM-L6-v2's int8 export embeds SST-2 sentences as its Keras model does (cosine),
    and classifies them alike: nearest of the two sentiment centroids of 200 training sentences."""
    model, texts, expected, centroids = minilm_sst2
    path = tmp_path / f"int8.{'tflite' if format == 'litert' else 'onnx'}"
    export = deploy.export_litert if format == "litert" else deploy.export_onnx
    export(model, model.preprocessor, path, quantize="int8")
    runtime = deploy.predictor(format, path)
    if format == "litert":
        got = runtime(text=np.array(texts, dtype=object))["embeddings"]
    else:
        got = runtime(**{name: ids.numpy() for name, ids in model.preprocessor(tf.constant(texts)).items()})[
            "embeddings"
        ]
    cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
    agreement = np.mean((got @ centroids.T).argmax(-1) == (expected @ centroids.T).argmax(-1))
    least, mean, classes = INT8_AGREEMENT[format]
    assert cosine.min() >= least and cosine.mean() >= mean and agreement >= classes, (cosine, agreement)
    assert cosine.min() < 1 - 1e-4  # quantized, not the float32 model


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


@pytest.mark.slow
def test_litert_refuses_rather_than_answers_what_it_cannot_tokenize(float32_exports):
    *_, path, _ = float32_exports("classifier", "litert")
    runtime = deploy.predictor("litert", path)
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

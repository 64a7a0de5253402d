"""Issue 43: every model a `finetune` command writes exports through `bert-keras export
--format litert|onnx [--quantize int8]`, and the file answers as the Keras model does.

The models are tiny but made by the commands themselves, so they carry what fine-tuning
records: label names, their own vocabulary, the trained preprocessor. The reference is the
Keras model loaded from the run's best.keras, on the same texts or packed ids."""

import keras
import numpy as np
import pytest
from trained_models import TEXTS

from bert_keras.serving import deploy
from bert_keras_cli.cli import main as cli

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

SUFFIX = {"litert": ".tflite", "onnx": ".onnx"}


def export(model_path, format, quantize, out):
    path = out / f"{model_path.parent.name}-{quantize or 'float32'}{SUFFIX[format]}"
    assert (
        cli(
            ["export", str(model_path), "--format", format, *(["--quantize", quantize] if quantize else [])]
            + [
                "--out",
                str(path),
            ]
        )
        == 0
    )
    return path


def assert_answers_as_keras(path, format, model, output, tolerance):
    """The export on text (where it takes text) or on the Keras model's packed ids, against
    the Keras model on the same; `output` names the export's output of the model's tensor.
    Returns the export's outputs and the Keras model's."""
    runtime = deploy.predictor(format, path)
    texts = np.array(TEXTS)
    packed = model.preprocessor([texts] * len(model.text_input_names))
    if format == "litert" and "tokenize" in runtime.signatures:  # one input a text segment
        got = runtime(**{name: texts.astype(object) for name in runtime.signatures["serving_default"]["inputs"]})
    else:
        got = runtime(**{name: np.asarray(value) for name, value in packed.items()})
    want = model(packed, training=False)
    want = want if isinstance(want, dict) else {output: want}
    for name, value in want.items():
        np.testing.assert_allclose(
            got[name], np.reshape(value, got[name].shape), atol=tolerance, err_msg=f"{path}: {name}"
        )
    return got, want


@pytest.mark.parametrize(
    ("format", "quantize"),
    [
        ("litert", None),
        ("onnx", None),
        pytest.param("litert", "int8", marks=pytest.mark.slow),
        pytest.param("onnx", "int8", marks=pytest.mark.slow),
    ],
)
def test_a_glue_classifier_with_label_names_exports(finetuned, tmp_path, capsys, format, quantize):
    """SST-2 through `finetune glue`: label names, text in (LiteRT) or ids in (ONNX); the
    `labels` output names the class Keras predicts, and a LiteRT row it refuses (combining
    marks NFD would reorder) names none."""
    model_path = finetuned("glue") / "best.keras"
    model = keras.saving.load_model(model_path)
    assert model.labels == ["0", "1"]
    path = export(model_path, format, quantize, tmp_path)
    assert "largest difference from Keras" in capsys.readouterr().out
    got, keras_outputs = assert_answers_as_keras(
        path, format, model, "logits", deploy.TOLERANCE if quantize is None else 0.05
    )
    if quantize is None:
        want = [model.labels[index] for index in np.argmax(keras_outputs["logits"], axis=-1)]
        assert [label.decode() if isinstance(label, bytes) else label for label in got["labels"]] == want
    if format == "litert":
        runner = deploy.predictor(format, path).interpreter.get_signature_runner("serving_default")
        raw = runner(text=np.array(["the dog", deploy.REFUSED_TEXT], dtype=object))
        assert raw[deploy.EXACTNESS_OUTPUT].tolist() == [True, False]
        assert raw["labels"][1] in (b"", "") and raw["label_ids"][1] == -1 and raw["labels"][0] not in (b"", "")


@pytest.mark.slow  # a fine-tuning run (~20 s) and four exports (~6 s each) a command
@pytest.mark.parametrize(
    ("task", "output"),
    [("tsv", "logits"), ("conll", "logits"), ("squad", None), ("embedder", "embeddings"), ("reranker", "logits")],
)
def test_every_finetune_command_writes_a_model_that_exports(finetuned, tmp_path, task, output):
    """Pairs with label names and a cross-encoder (text pairs in LiteRT), a tagger with tag
    names, spans, an embedder: float32 within 1e-4 of Keras, int8 exports run."""
    model_path = finetuned(task) / "best.keras"
    model = keras.saving.load_model(model_path)
    for format in deploy.FORMATS:
        path = export(model_path, format, None, tmp_path)
        assert_answers_as_keras(path, format, model, output, deploy.TOLERANCE)
        assert export(model_path, format, "int8", tmp_path).stat().st_size > 0

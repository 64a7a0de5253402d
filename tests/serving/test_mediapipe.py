"""MediaPipe exports, run by the `mediapipe` package's own TextClassifier and TextEmbedder:
our class names come back, scores and embeddings equal the Keras model's on the ids the
original tokenizer gives, and MediaPipe's tokenizer is checked against ours through the
tokenizer probe."""

import dataclasses
import io
import zipfile

import numpy as np
import pytest
import tensorflow as tf
from harness import TINY, VOCAB, tiny_encoder, tiny_preprocessor

from bert_keras import (
    BertClassifier,
    BertEncoder,
    BertPreprocessor,
    BertTextEmbedder,
    BertTokenClassifier,
    BertTokenizer,
)
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.serving import mediapipe_metadata

# Lowercased by MediaPipe and split as the original does: both give the same ids.
TEXTS = ["The quick brown fox jumps over the lazy dog.", "", "who did go home, john?", "A GOOD FILM!", "paris 中文"]
SEQ_LENGTH = 16


def keras_outputs(model, output, texts=TEXTS):
    packed = BertPreprocessor(BertTokenizer(VOCAB), seq_length=SEQ_LENGTH)(tf.constant(texts))
    outputs = model.serving_signature(tiny_preprocessor()).from_ids(packed, lambda x: model(x, training=False))
    return outputs[output].numpy()


@pytest.mark.slow
def test_classifier_answers_our_labels_and_keras_scores(tmp_path):
    labels = ["négatif", "neutral", "positive"]
    model = BertClassifier(tiny_encoder(), num_classes=3, labels=labels)
    path = tmp_path / "classifier.tflite"
    mediapipe_metadata.export_mediapipe(model, tiny_preprocessor(), path, seq_length=SEQ_LENGTH)
    with mediapipe_metadata.MediaPipeTask(path) as task:
        scores, names = task(TEXTS)
    assert names == labels
    np.testing.assert_allclose(scores, keras_outputs(model, "probabilities"), atol=1e-4)
    with zipfile.ZipFile(path) as files:
        assert files.read("vocab.txt").decode().splitlines() == VOCAB
        assert all(info.compress_type == zipfile.ZIP_STORED for info in files.infolist())


@pytest.mark.slow
def test_embedder_answers_keras_embeddings(tmp_path):
    model = BertTextEmbedder(tiny_encoder(), preprocessor=tiny_preprocessor())
    path = tmp_path / "embedder.tflite"
    mediapipe_metadata.export_mediapipe(model, tiny_preprocessor(), path, seq_length=SEQ_LENGTH)
    with mediapipe_metadata.MediaPipeTask(path) as task:
        embeddings, names = task(TEXTS)
    assert names is None
    np.testing.assert_allclose(embeddings, keras_outputs(model, "embeddings"), atol=1e-4)


@pytest.mark.slow
def test_export_checked_names_the_labels_of_an_unlabelled_classifier(tmp_path):
    model = BertClassifier(tiny_encoder(), num_classes=2)
    difference, names = mediapipe_metadata.export_checked(model, tiny_preprocessor(), tmp_path / "m.tflite")
    assert names == ["0", "1"] and difference <= 1e-4


def test_tokenizer_probe_answers_mediapipe_ids(tmp_path):
    """On texts the original tokenizer splits as MediaPipe does, the probe's ids are the
    original's; MediaPipe keeps accents (the original strips them: "é" -> "e") and does
    not lowercase non-ASCII letters."""
    vocabulary = [*VOCAB, "e", "##e", "é"]
    tokenizer = BertTokenizer(vocabulary)
    path = tmp_path / "probe.tflite"
    mediapipe_metadata.tokenizer_probe(vocabulary, SEQ_LENGTH, path)
    texts = [*TEXTS, "É"]
    packed = BertPreprocessor(tokenizer, seq_length=SEQ_LENGTH)(tf.constant(texts))
    with mediapipe_metadata.MediaPipeTask(path) as task:
        probed, _ = task(texts)
    probed = probed.astype(np.int32).reshape(len(texts), 3, SEQ_LENGTH)
    for row, name in enumerate(INPUT_NAMES):
        np.testing.assert_array_equal(probed[: len(TEXTS), row], packed[name].numpy()[: len(TEXTS)])
    assert packed["input_word_ids"][-1, 1] == vocabulary.index("e")
    assert probed[-1, 0, 1] == tokenizer.unk_id  # "É", not lowercased by MediaPipe: not in the vocabulary


@pytest.mark.slow
def test_metadata_is_what_mediapipe_reads(tmp_path):
    """The schema's own reader finds the tokenizer, the input roles and the label file."""
    from mediapipe.tasks.metadata import metadata_schema_py_generated as schema

    from bert_keras.serving import deploy, portable

    function, specs = mediapipe_metadata.mediapipe_function(
        BertClassifier(tiny_encoder(), num_classes=2).serving_signature(tiny_preprocessor()), SEQ_LENGTH
    )
    flatbuffer = deploy.litert_flatbuffer({"serving_default": (function, specs)}, None, "BertClassifier")
    model_file = mediapipe_metadata.with_metadata(flatbuffer, VOCAB, ["no", "yes"])
    litert = portable.require("ai_edge_litert.schema_py_generated", "reading")
    model = litert.Model.GetRootAsModel(model_file, 0)
    (entry,) = [e for e in map(model.Metadata, range(model.MetadataLength())) if e.Name() == b"TFLITE_METADATA"]
    data = model.Buffers(entry.Buffer()).DataAsNumpy().tobytes()
    metadata = schema.ModelMetadata.GetRootAsModelMetadata(data, 0)
    assert metadata.MinParserVersion().decode() == "1.1.0"
    subgraph = metadata.SubgraphMetadata(0)
    graph = model.Subgraphs(0)
    roles = {
        subgraph.InputTensorMetadata(i).Name().decode(): graph.Tensors(graph.Inputs(i)).Name().decode()
        for i in range(3)
    }
    assert {role: name.split("_", 2)[-1].split(":")[0] for role, name in roles.items()} == {
        "ids": "input_word_ids",
        "mask": "input_mask",
        "segment_ids": "input_type_ids",
    }
    assert subgraph.InputProcessUnits(0).OptionsType() == schema.ProcessUnitOptions.BertTokenizerOptions
    label_file = subgraph.OutputTensorMetadata(0).AssociatedFiles(0)
    assert label_file.Type() == schema.AssociatedFileType.TENSOR_AXIS_LABELS
    with zipfile.ZipFile(io.BytesIO(model_file)) as files:
        assert files.read(label_file.Name().decode()).decode().splitlines() == ["no", "yes"]


def test_refusals_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="lowercases every text; a cased vocabulary"):
        mediapipe_metadata.export_mediapipe(
            BertClassifier(tiny_encoder(), num_classes=2),
            BertPreprocessor(BertTokenizer(VOCAB, lower_case=False)),
            tmp_path / "m.tflite",
        )
    with pytest.raises(ValueError, match="run a BertClassifier or BertTextEmbedder, not a BertTokenClassifier"):
        mediapipe_metadata.export_mediapipe(
            BertTokenClassifier(tiny_encoder(), num_classes=2), tiny_preprocessor(), tmp_path / "m.tflite"
        )
    with pytest.raises(ValueError, match="this BertClassifier is a regression"):
        mediapipe_metadata.export_mediapipe(
            BertClassifier(tiny_encoder(), num_classes=1), tiny_preprocessor(), tmp_path / "m.tflite"
        )


@pytest.mark.parametrize(
    "labels, problem",
    [
        ([], r"0 label\(s\) for the classifier's 2 classes"),
        (["a"] * 100_000, r"100000 label\(s\) for the classifier's 2 classes"),
        (["a", "b", "c"], r"3 label\(s\) for the classifier's 2 classes"),
        (["", "b"], r"label 0 \(''\) is not a name"),
        (["good", " "], r"label 1 \(' '\) is not a name"),
        (["a\nb", "c"], r"label 0 \('a\\nb'\) holds a line break"),
        (["a", "b\tc"], r"label 1 \('b\\tc'\) holds a line break, tab"),
        (["\x00\x01\x02", "b"], r"label 0 \('\\x00\\x01\\x02'\) holds a line break"),
        (["a\u2028b", "c"], r"label 0 .* holds a line break"),
    ],
)
def test_bad_labels_are_refused_naming_the_file(tmp_path, labels, problem):
    """Refused before the conversion, in one line naming the export and its labels.txt."""
    path = tmp_path / "m.tflite"
    model = BertClassifier(tiny_encoder(), num_classes=2)
    with pytest.raises(ValueError, match=rf"^{path} \(labels.txt\): {problem}[^\n]*$"):
        mediapipe_metadata.export_mediapipe(model, tiny_preprocessor(), path, labels=labels)
    assert not path.exists()


@pytest.mark.slow
def test_cli_exports_for_mediapipe_with_labels(tmp_path, capsys):
    from pathlib import Path

    from bert_keras_cli.cli import main as cli

    fixture = str(Path(__file__).parents[1] / "fixtures" / "classifier_v0.keras")
    out = tmp_path / "m.tflite"
    command = ["export", fixture, "--format", "litert", "--mediapipe", "--labels", "x", "y", "z", "--out", str(out)]
    assert cli(command) == 0
    printed = capsys.readouterr().out
    assert "MediaPipe" in printed and "labels x, y, z" in printed and "int32 [1, 12]" in printed  # its seq_length
    with mediapipe_metadata.MediaPipeTask(out) as task:
        assert task(["the quick brown fox"])[1] == ["x", "y", "z"]
    assert cli([*command[:-5], "x", "y\tz", "w", "--out", str(tmp_path / "tab.tflite")]) == 2
    assert "tab.tflite (labels.txt): label 1 ('y\\tz') holds a line break, tab" in capsys.readouterr().err
    assert cli(["export", fixture, "--format", "onnx", "--mediapipe", "--out", str(tmp_path / "m.onnx")]) == 2
    assert "--mediapipe is an option of --format litert" in capsys.readouterr().err


@pytest.mark.slow
def test_int8_export_runs_in_mediapipe(tmp_path):
    """LiteRT's dynamic-range int8 file (matrices big enough to quantize) runs in MediaPipe,
    close to float32 and smaller."""
    model = BertClassifier(BertEncoder(dataclasses.replace(TINY, hidden_size=64, intermediate_size=256)), num_classes=2)
    sizes = {}
    for quantize in (None, "int8"):
        path = tmp_path / f"{quantize}.tflite"
        difference, names = mediapipe_metadata.export_checked(model, tiny_preprocessor(), path, quantize=quantize)
        sizes[quantize] = path.stat().st_size
    assert names == ["0", "1"] and 0 < difference < 0.05
    assert sizes["int8"] < 0.5 * sizes[None]

"""Feature-based use on the real all-MiniLM-L6-v2 weights, checked against the Hugging Face
reference outputs in ../shared/reference: `BertFeatureExtractor` and the
`bert-keras extract-features` JSON lines."""

import json

import numpy as np
import pytest
from conftest import DATA, REFERENCE, require

from bert_keras import BertEncoder
from bert_keras.tasks.feature_extractor import BertFeatureExtractor
from bert_keras_cli.cli import main as cli

ATOL = 2e-4


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(require(REFERENCE / "minilm_l6_encoder.npz")))


def test_last_four_layers_and_mean_pooling_match_the_reference(minilm_dir, reference):
    extractor = BertFeatureExtractor(BertEncoder.from_checkpoint(minilm_dir), layers=(-1, -2, -3, -4))
    inputs = {name: reference[name].astype("int32") for name in ("input_word_ids", "input_mask", "input_type_ids")}
    outputs = extractor.predict(inputs, verbose=0)
    mask = reference["input_mask"].astype(bool)
    layers = reference["encoder_outputs"]  # layers 1..6
    expected = np.concatenate([layers[5], layers[4], layers[3], layers[2]], axis=-1)
    assert outputs["token_features"].shape == (12, 128, 4 * 384)
    np.testing.assert_allclose(outputs["token_features"][mask], expected[mask], atol=ATOL)
    weights = mask[..., None].astype("float64")
    mean = (expected * weights).sum(1) / weights.sum(1)
    np.testing.assert_allclose(outputs["sentence_features"], mean, atol=ATOL)


@pytest.mark.slow
def test_extract_features_writes_the_original_json_lines(minilm_dir, reference, tmp_path, capsys):
    texts = json.loads(require(REFERENCE / "minilm_l6_encoder_inputs.json").read_text())
    source = tmp_path / "input.txt"
    source.write_text("".join(t["text_a"] + (f" ||| {t['text_b']}" if t["text_b"] else "") + "\n" for t in texts))
    output = tmp_path / "features.jsonl"
    assert (
        cli(
            [
                "extract-features",
                "--input",
                str(source),
                "--output",
                str(output),
                "--layers=-1,-3",
                "--max-seq-length",
                "128",
                "--batch-size",
                "5",
                "--pooling",
                "mean",
            ]
        )
        == 0
    )
    assert "wrote features of 12 inputs (2 layers)" in capsys.readouterr().out
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["linex_index"] for line in lines] == list(range(12))
    vocab = (DATA / "vocab" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    for index, line in enumerate(lines):
        length = int(reference["input_mask"][index].sum())
        tokens = [feature["token"] for feature in line["features"]]
        assert tokens == [vocab[i] for i in reference["input_word_ids"][index, :length]]
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        for feature, position in zip(line["features"], range(length)):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -3]
            np.testing.assert_allclose(
                feature["layers"][0]["values"], reference["sequence_output"][index, position], atol=ATOL
            )
            np.testing.assert_allclose(
                feature["layers"][1]["values"], reference["encoder_outputs"][3, index, position], atol=ATOL
            )
        # Values are rounded to 6 decimals, as the original writes them.
        assert all(round(v, 6) == v for v in line["features"][0]["layers"][0]["values"])
        mean = reference["sequence_output"][index, :length].mean(0)
        np.testing.assert_allclose(line["sentence_layers"][0]["values"], mean, atol=ATOL)


def test_extract_features_reports_bad_arguments(tmp_path, capsys):
    source = tmp_path / "input.txt"
    source.write_text("a ||| b ||| c\n")
    assert (
        cli(
            [
                "extract-features",
                "--input",
                str(source),
                "--output",
                str(tmp_path / "o"),
                "--init",
                str(tmp_path),  # exists, so the input file is read (and refused) before any checkpoint
                "--layers=-1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "input.txt:1: more than one ' ||| ' separator" in err
    source.write_text("a\n")
    assert cli(["extract-features", "--input", str(source), "--output", str(tmp_path / "o"), "--layers", "x"]) == 2
    assert "--layers must be comma-separated integers" in capsys.readouterr().err

"""keras-hub BERT presets in and out, against keras-hub itself: a tiny `BertTextClassifier`
built and saved here with `save_to_preset` loads as a `BertClassifier` with keras-hub's
logits on raw text, and what `bert-keras convert --to keras-hub` writes runs in keras-hub's
own `from_preset` (through its own preprocessor) with ours; a `BertMaskedLM` loads as a
`BertPretrainer` with keras-hub's masked-LM logits and fills masks in `predict`."""

import json
import shutil
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from harness import TINY, TOLERANCE, VOCAB, tiny_preprocessor
from hub_server import cache_snapshot, use_hub

from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPretrainer, BertTextEmbedder, BertTokenClassifier
from bert_keras.checkpoint.keras_hub_preset import PRESET_VOCAB
from bert_keras_cli.cli import main as cli

keras_hub = pytest.importorskip("keras_hub")

# Capitals, so that a tokenizer that did not lower-case as the preset says would differ.
TEXTS = ["The quick brown fox jumps over the lazy dog.", "a good film", "Who did go home?"]
KAGGLE_HANDLE = "kaggle://someone/bert/keras/tiny_classifier/1"
FILL_MASK = "the [MASK] brown fox"


def randomized(model, seed):
    """`model` with weights of about unit scale, so that logits differ by more than the tolerance."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """A keras-hub classifier preset, its MaskedLM and TextEmbedder twins on the same backbone,
    keras-hub's logits and embeddings of TEXTS, and its masked-LM logits of packed FILL_MASK
    rows at their mask positions."""
    folder = tmp_path_factory.mktemp("keras_hub")
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB),
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=64,
    )
    masked_lm = keras_hub.models.BertMaskedLM(
        backbone, preprocessor=keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=24)
    )
    randomized(masked_lm, seed=3)  # its head keeps these weights; the classifier's draw the backbone's again
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=24)
    classifier = randomized(keras_hub.models.BertTextClassifier(backbone, 3, preprocessor=preprocessor), seed=0)
    classifier.save_to_preset(str(folder / "classifier"))
    masked_lm.save_to_preset(str(folder / "masked_lm"))
    embedder = keras_hub.models.BertTextEmbedder(
        backbone,
        preprocessor=keras_hub.models.BertTextEmbedderPreprocessor(tokenizer, sequence_length=24),
        pooling_mode="max",
    )
    embedder.save_to_preset(str(folder / "embedder"))
    logits = classifier.predict(TEXTS, verbose=0)
    assert np.abs(logits).max() > 0.5
    rows = [["[CLS]", *FILL_MASK.split(), "[SEP]"], ["[CLS]", "a", "[MASK]", "film", "[SEP]", "[PAD]"]]
    mlm_inputs = {
        "token_ids": np.array([[VOCAB.index(token) for token in row] for row in rows], "int32"),
        "segment_ids": np.zeros((2, 6), "int32"),
        "padding_mask": np.array([[1] * 6, [1] * 5 + [0]], "int32"),
        "mask_positions": np.array([[2, 4], [2, 1]], "int32"),
    }
    return {
        **{name: folder / name for name in ("classifier", "masked_lm", "embedder")},
        "logits": logits,
        "vectors": embedder.predict(TEXTS, verbose=0),
        "mlm_inputs": mlm_inputs,
        "mlm_logits": keras.ops.convert_to_numpy(masked_lm(mlm_inputs)),
    }


def keras_hub_logits(folder):
    return keras_hub.models.BertTextClassifier.from_preset(str(folder)).predict(TEXTS, verbose=0)


@pytest.mark.slow
def test_a_keras_hub_classifier_loads_with_its_logits_and_tokenizer(preset):
    with pytest.warns(UserWarning, match="lower-cases without stripping accents"):
        model = BertClassifier.from_checkpoint(preset["classifier"])
    assert model.num_classes == 3 and model.preprocessor.tokenizer.lower_case
    assert model.preprocessor.packer.max_seq_length == 24  # preprocessor.json's sequence_length
    assert model.config.hidden_act == "gelu_tanh"
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0), preset["logits"], atol=TOLERANCE)


@pytest.mark.slow
def test_a_preset_on_the_hugging_face_hub_loads_by_its_name(preset, tmp_path, monkeypatch):
    """keras-hub presets on the Hub (the keras/ organisation's) are Keras files, not
    safetensors: every file of the preset is fetched, and the name gives keras-hub's logits offline."""
    snapshot = cache_snapshot(tmp_path / "home", "keras/tiny-bert-classifier", preset["classifier"])
    files = sorted(p.relative_to(preset["classifier"]).as_posix() for p in Path(preset["classifier"]).rglob("*"))
    assert sorted(p.relative_to(snapshot.path).as_posix() for p in snapshot.path.rglob("*")) == files
    use_hub(monkeypatch, tmp_path / "home")
    model = BertClassifier.from_checkpoint("hf://keras/tiny-bert-classifier")
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0), preset["logits"], atol=TOLERANCE)


def test_predict_runs_a_keras_hub_preset_with_its_probabilities(preset, tmp_path):
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert cli(["predict", str(preset["classifier"]), "--input", str(lines), "--output", str(out), "--all-scores"]) == 0
    scores = [list(json.loads(line)["scores"].values()) for line in out.read_text().splitlines()]
    np.testing.assert_allclose(scores, keras.ops.convert_to_numpy(keras.ops.softmax(preset["logits"])), atol=TOLERANCE)


@pytest.mark.slow
def test_a_keras_hub_text_embedder_in_and_out_keeps_its_pooling_and_vectors(preset, tmp_path):
    model = BertTextEmbedder.from_checkpoint(preset["embedder"])
    assert model.pooling == "max" and model.normalize
    np.testing.assert_allclose(model.encode(TEXTS), preset["vectors"], atol=TOLERANCE)
    model.save_checkpoint(tmp_path / "back", format="keras-hub")
    theirs = keras_hub.models.BertTextEmbedder.from_preset(str(tmp_path / "back"))
    assert theirs.pooling_mode == "max" and theirs.normalize
    np.testing.assert_allclose(theirs.predict(TEXTS, verbose=0), preset["vectors"], atol=TOLERANCE)


def pretrainer_logits(model, inputs):
    names = {"input_word_ids": "token_ids", "input_type_ids": "segment_ids", "input_mask": "padding_mask"}
    ours = {**{name: inputs[theirs] for name, theirs in names.items()}, "masked_lm_positions": inputs["mask_positions"]}
    return keras.ops.convert_to_numpy(model(ours)["mlm_logits"])


@pytest.mark.slow
def test_a_keras_hub_masked_lm_is_a_pretrainer_with_its_logits_in_predict_and_back(preset, tmp_path):
    """keras-hub's head (exact GELU, LayerNorm epsilon 1e-5 on a tanh-GELU backbone) is kept,
    in a .keras file too: the encoder's settings would give other logits; `predict` fills masks with keras-hub's
    probabilities; `convert --to keras-hub` writes a BertMaskedLM keras-hub runs the same, and
    `--to hf` says what transformers' head computes instead."""
    model = BertPretrainer.from_checkpoint(preset["masked_lm"])
    assert not model.next_sentence and model.config.hidden_act == "gelu_tanh"
    np.testing.assert_allclose(pretrainer_logits(model, preset["mlm_inputs"]), preset["mlm_logits"], atol=TOLERANCE)
    plain = BertPretrainer(model.encoder, next_sentence=False)
    plain.masked_lm_head.set_weights(model.masked_lm_head.get_weights())
    assert np.abs(pretrainer_logits(plain, preset["mlm_inputs"]) - preset["mlm_logits"]).max() > 10 * TOLERANCE
    model.save(tmp_path / "pretrainer.keras")
    saved = keras.saving.load_model(tmp_path / "pretrainer.keras")
    np.testing.assert_allclose(pretrainer_logits(saved, preset["mlm_inputs"]), preset["mlm_logits"], atol=TOLERANCE)

    (tmp_path / "in.txt").write_text(FILL_MASK + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert cli(["predict", str(preset["masked_lm"]), "--input", str(tmp_path / "in.txt"), "--output", str(out)]) == 0
    (filled,) = json.loads(out.read_text())["masks"]
    probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(preset["mlm_logits"][0, 0].astype("float64")))
    best = np.argsort(-probabilities)[:5]
    assert filled["position"] == 2 and filled["tokens"] == [VOCAB[i] for i in best]
    np.testing.assert_allclose(filled["probabilities"], probabilities[best], atol=TOLERANCE)

    assert cli(["convert", str(preset["masked_lm"]), "--to", "keras-hub", str(tmp_path / "back")]) == 0
    theirs = keras_hub.models.BertMaskedLM.from_preset(str(tmp_path / "back"))
    np.testing.assert_allclose(theirs(preset["mlm_inputs"]), preset["mlm_logits"], atol=TOLERANCE)
    with pytest.warns(UserWarning, match="computes gelu_tanh and LayerNorm epsilon 1e-12, not this model's gelu and"):
        assert cli(["convert", str(preset["masked_lm"]), "--to", "hf", str(tmp_path / "hf")]) == 0


def test_convert_keras_hub_to_hf_and_back_keeps_keras_hubs_logits(preset, tmp_path, capsys):
    """preset -> Hugging Face folder -> preset, each by `bert-keras convert`; the last read by keras-hub."""
    assert cli(["convert", str(preset["classifier"]), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert "wrote hf BertClassifier" in capsys.readouterr().out
    assert cli(["convert", str(tmp_path / "hf"), "--to", "keras-hub", str(tmp_path / "back")]) == 0
    np.testing.assert_allclose(keras_hub_logits(tmp_path / "back"), preset["logits"], atol=TOLERANCE)


@pytest.mark.slow
def test_a_bert_keras_classifier_runs_in_keras_hub_with_its_logits(tmp_path):
    """A model of our own (tanh GELU, as keras-hub computes), through its own tokenizer settings."""
    keras.utils.set_random_seed(1)
    encoder = BertEncoder(BertConfig(**{**TINY.to_dict(), "hidden_act": "gelu_tanh"}))
    model = randomized(BertClassifier(encoder, num_classes=2, preprocessor=tiny_preprocessor()), seed=1)
    model.save_checkpoint(tmp_path / "preset", format="keras-hub")  # the command's path: the round trip above
    theirs = keras_hub.models.BertTextClassifier.from_preset(str(tmp_path / "preset"))
    assert theirs.preprocessor.sequence_length == 32 and theirs.preprocessor.tokenizer.lowercase
    np.testing.assert_allclose(theirs.predict(TEXTS, verbose=0), model.predict(TEXTS, verbose=0), atol=TOLERANCE)


def test_other_heads_write_the_backbone_and_say_what_is_lost(tmp_path):
    keras.utils.set_random_seed(2)
    model = BertTokenClassifier(BertEncoder(TINY), num_classes=3, preprocessor=tiny_preprocessor())
    model.save(tmp_path / "tagger.keras")
    with pytest.warns(UserWarning) as said:
        assert cli(["convert", str(tmp_path / "tagger.keras"), "--to", "keras-hub", str(tmp_path / "preset")]) == 0
    said = " ".join(str(warning.message) for warning in said)
    assert "keras-hub has no BertForTokenClassification head" in said and "tanh approximation of GELU" in said
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))
    assert isinstance(backbone, keras_hub.models.BertBackbone)
    assert keras_hub.models.BertTokenizer.from_preset(str(tmp_path / "preset")).vocabulary == VOCAB
    ours = keras.ops.convert_to_numpy(model.encoder.embeddings.word_embeddings)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(backbone.token_embedding.embeddings), ours)


def damage_missing_weights(folder):
    (folder / "model.weights.h5").unlink()
    return "no model.weights.h5 in keras-hub preset"


def damage_truncated_task_weights(folder):
    data = (folder / "task.weights.h5").read_bytes()
    (folder / "task.weights.h5").write_bytes(data[: len(data) // 2])
    return "task.weights.h5: not a complete Keras weights file"


def damage_garbled_config(folder):
    (folder / "config.json").write_text("{not json")
    return "config.json is not valid JSON"


def damage_missing_vocabulary(folder):
    (folder / "assets/tokenizer/vocabulary.txt").unlink()
    return "has no assets/tokenizer/vocabulary.txt"


@pytest.mark.parametrize(
    "damage",
    [damage_missing_weights, damage_truncated_task_weights, damage_garbled_config, damage_missing_vocabulary],
)
def test_a_damaged_preset_is_one_line_naming_the_file(preset, tmp_path, capsys, damage):
    folder = tmp_path / "preset"
    shutil.copytree(preset["classifier"], folder)
    expected = damage(folder)
    assert cli(["convert", str(folder), "--to", "hf", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("bert-keras convert: error: "), err
    assert expected in err and str(folder) in err, err


def test_kaggle_handles_resolve_through_kagglehub(preset, tmp_path, monkeypatch, capsys):
    kagglehub = pytest.importorskip("kagglehub")
    asked = []
    monkeypatch.setattr(kagglehub, "model_download", lambda handle: asked.append(handle) or str(preset["classifier"]))
    assert BertEncoder.from_checkpoint(KAGGLE_HANDLE).vocab_path == preset["classifier"] / PRESET_VOCAB
    assert cli(["convert", KAGGLE_HANDLE, "--to", "hf", str(tmp_path / "hf")]) == 0
    assert f"resolved {KAGGLE_HANDLE} to {preset['classifier']}" in capsys.readouterr().out
    assert asked == ["someone/bert/keras/tiny_classifier/1"] * 2
    assert cli(["convert", "kaggle://someone/bert", "--to", "hf", str(tmp_path / "x")]) == 2
    assert "kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "kagglehub", None)
    assert cli(["convert", KAGGLE_HANDLE, "--to", "hf", str(tmp_path / "y")]) == 2
    assert "kaggle:// handles are downloaded with kagglehub (pip install kagglehub)" in capsys.readouterr().err


def test_writing_a_preset_without_keras_hub_is_one_line(preset, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "keras_hub", None)
    assert cli(["convert", str(preset["classifier"]), "--to", "keras-hub", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "bert-keras convert: error: convert --to keras-hub needs keras-hub (pip install 'bert-keras[keras-hub]')"
    )

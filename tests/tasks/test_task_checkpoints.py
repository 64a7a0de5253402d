"""Fine-tuned task models in and out: Hugging Face BertFor* folders and TF1 checkpoints
with their heads and labels, against the logits transformers computed for the same
folders (tests/fixtures/tasks, written by tests/fixtures/make_task_references.py)."""

import contextlib
import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import TASK_FIXTURES as FIXTURES
from harness import TASK_REFERENCES as REFERENCES
from harness import hf_folder
from safetensors.numpy import load_file, save_file

from bert_keras import (
    BertClassifier,
    BertEncoder,
    BertMultipleChoice,
    BertPretrainer,
    BertSpanLabeler,
    BertTokenClassifier,
    checkpoint,
)
from bert_keras.checkpoint.tf1 import TF1_PREFIX
from bert_keras.models import saving
from bert_keras.models.saving import save_checkpoint
from bert_keras.tasks import head_loading
from bert_keras_cli.cli import main as cli

HEADS = {
    "sequence_single": BertClassifier,
    "sequence_multi": BertClassifier,
    "sequence_regression": BertClassifier,
    "token": BertTokenClassifier,
    "question_answering": BertSpanLabeler,
    "multiple_choice": BertMultipleChoice,
}
LABELS = {
    "sequence_single": ["negative", "neutral", "positive"],
    "sequence_multi": ["sports", "politics", "science", "travel"],
    "token": ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"],
}
pytestmark = pytest.mark.filterwarnings("ignore:.*starting them from new initial values")


def packed(name):
    return {key: REFERENCES[f"{name}/{key}"] for key in ("input_word_ids", "input_mask", "input_type_ids")}


def assert_close(actual, expected, mask=None):
    """Within 1e-5 of the reference, relative to its largest magnitude."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if mask is not None:
        actual, expected = actual * mask, expected * mask
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def outputs_of(model, name):
    """The model's outputs on the reference inputs, as transformers' are stored."""
    inputs = packed(name)
    if name == "masked_lm":
        inputs = {key: value[:2] for key, value in inputs.items()}
        inputs["masked_lm_positions"] = REFERENCES["masked_lm/positions"]
        return {"logits": model(inputs)["mlm_logits"]}
    outputs = model(inputs)
    return outputs if isinstance(outputs, dict) else {"logits": outputs}


def check_against_transformers(model, name):
    mask = REFERENCES[f"{name}/input_mask"]
    for key, value in outputs_of(model, name).items():
        per_token = name in ("token", "question_answering")
        assert_close(
            value, REFERENCES[f"{name}/{key}"], (mask[..., None] if key == "logits" else mask) if per_token else None
        )


@pytest.mark.parametrize("name", sorted(HEADS))
def test_hugging_face_heads_give_the_logits_of_transformers(tmp_path, name):
    model = HEADS[name].from_checkpoint(hf_folder(tmp_path, name))
    check_against_transformers(model, name)
    assert model.labels == LABELS.get(name)
    if HEADS[name] is BertClassifier:
        assert model.multi_label == (name == "sequence_multi")
        assert model.num_classes == REFERENCES[f"{name}/logits"].shape[1]
    # Raw text goes through the same tokenization as transformers' BertTokenizer.
    if name.startswith("sequence"):
        ids = model.preprocessor(tf.constant(["the quick brown fox jumps over the lazy dog"]))["input_word_ids"]
        expected = REFERENCES[f"{name}/input_word_ids"][0]
        np.testing.assert_array_equal(ids[0, : len(expected)], expected)


def test_masked_lm_folder_loads_as_a_pretrainer_without_next_sentence(tmp_path):
    with pytest.warns(UserWarning, match="bert/pooler"):  # BertForMaskedLM has no pooler
        model = BertPretrainer.from_checkpoint(hf_folder(tmp_path, "masked_lm"))
    assert not model.next_sentence
    check_against_transformers(model, "masked_lm")


@pytest.mark.parametrize("name", sorted(HEADS) + ["masked_lm"])
def test_the_encoder_of_any_task_folder_loads_as_an_encoder(tmp_path, name):
    encoder = BertEncoder.from_checkpoint(hf_folder(tmp_path, name))
    model = HEADS.get(name, BertPretrainer).from_checkpoint(hf_folder(tmp_path, name))
    inputs = {key: value.reshape(-1, value.shape[-1]) for key, value in packed(name).items()}
    np.testing.assert_array_equal(encoder(inputs)["sequence_output"], model.encoder(inputs)["sequence_output"])


@pytest.mark.parametrize("name", sorted(HEADS) + ["masked_lm"])
def test_hugging_face_round_trip_is_weight_exact_and_keeps_labels(tmp_path, name):
    """HF -> .keras -> HF with `bert-keras convert`: the same tensors and config fields."""
    source = hf_folder(tmp_path, name)
    assert cli(["convert", str(source), "--to", "keras", str(tmp_path / "model.keras")]) == 0
    assert cli(["convert", str(tmp_path / "model.keras"), "--to", "hf", str(tmp_path / "back")]) == 0
    original, written = (
        load_file(str(source / "model.safetensors")),
        load_file(str(tmp_path / "back/model.safetensors")),
    )
    original.pop("bert.embeddings.position_ids", None)
    assert written.keys() == original.keys()
    for key in original:
        np.testing.assert_array_equal(written[key], original[key], err_msg=key)
    before, after = (json.loads((folder / "config.json").read_text()) for folder in (source, tmp_path / "back"))
    labelled = HEADS.get(name) in (BertClassifier, BertTokenClassifier)
    for field in ("architectures", "vocab_size", "hidden_size") + (("id2label", "label2id") if labelled else ()):
        assert after[field] == before[field], field
    if before.get("problem_type"):
        assert after["problem_type"] == before["problem_type"]
    if name in HEADS:  # task models carry their preprocessor, so their tokenizer files travel
        assert (tmp_path / "back/vocab.txt").read_text() == (FIXTURES / "vocab.txt").read_text()
        assert json.loads((tmp_path / "back/tokenizer_config.json").read_text())["do_lower_case"] is True


@pytest.mark.parametrize("name", sorted(HEADS))
def test_tf1_round_trip_writes_the_original_head_variables(tmp_path, name):
    model = HEADS[name].from_checkpoint(hf_folder(tmp_path, name))
    model.save_checkpoint(tmp_path / "tf1", format="tf1")
    variables = dict(tf.train.list_variables(str(tmp_path / "tf1" / TF1_PREFIX)))
    head = "cls/squad/output_weights" if name == "question_answering" else "output_weights"
    weight = load_file(str(hf_folder(tmp_path, name) / "model.safetensors"))
    hf_name = "qa_outputs.weight" if name == "question_answering" else "classifier.weight"
    assert variables[head] == list(weight[hf_name].shape)  # [out, in], as run_classifier/run_squad store it
    np.testing.assert_array_equal(tf.train.load_variable(str(tmp_path / "tf1" / TF1_PREFIX), head), weight[hf_name])
    restored = HEADS[name].from_checkpoint(tmp_path / "tf1")
    assert restored.labels == LABELS.get(name)
    expected = checkpoint.get_original_weights(model.original_weight_map())
    actual = checkpoint.get_original_weights(restored.original_weight_map())
    assert actual.keys() == expected.keys()
    for key in expected:
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


def test_a_saved_head_comes_back_with_the_maximum_length_transformers_reads(tmp_path):
    """`model_max_length` in tokenizer_config.json is where transformers truncates (and
    windows) text for the folder: a head saved at 24 tokens loads at 24 again, not at its
    64 positions; the "no limit" placeholder transformers writes leaves the positions."""

    def length(path, **kwargs):
        return BertTokenClassifier.from_checkpoint(path, **kwargs).preprocessor.packer.max_seq_length

    assert json.loads((FIXTURES / "token/tokenizer_config.json").read_text())["model_max_length"] > 10**20
    assert length(hf_folder(tmp_path, "token")) == 64
    BertTokenClassifier.from_checkpoint(hf_folder(tmp_path, "token"), max_seq_length=24).save_checkpoint(
        tmp_path / "saved"
    )
    assert json.loads((tmp_path / "saved/tokenizer_config.json").read_text())["model_max_length"] == 24
    assert length(tmp_path / "saved") == 24
    assert length(tmp_path / "saved", max_seq_length=40) == 40


def test_weight_name_variants_of_the_hub_load(tmp_path):
    """`LayerNorm.gamma/beta`, no `bert.` prefix, a `position_ids` buffer and a decoder
    saved untied (equal to the embeddings) load to the same logits."""
    source = hf_folder(tmp_path, "masked_lm")
    tensors = load_file(str(source / "model.safetensors"))
    renamed = {}
    for key, value in tensors.items():
        key = (
            key.removeprefix("bert.")
            .replace("LayerNorm.weight", "LayerNorm.gamma")
            .replace("LayerNorm.bias", "LayerNorm.beta")
        )
        renamed[key] = value
    renamed["embeddings.position_ids"] = np.arange(64, dtype=np.int64)[None]
    renamed["cls.predictions.decoder.weight"] = renamed["embeddings.word_embeddings.weight"].copy()
    renamed["cls.predictions.decoder.bias"] = renamed.pop("cls.predictions.bias")
    save_file(renamed, str(source / "model.safetensors"))
    check_against_transformers(BertPretrainer.from_checkpoint(source), "masked_lm")

    renamed["cls.predictions.decoder.weight"] = renamed["cls.predictions.decoder.weight"] + 1
    save_file(renamed, str(source / "model.safetensors"))
    with pytest.raises(ValueError, match="decoder.weight differs from the word embeddings"):
        BertPretrainer.from_checkpoint(source)


def test_run_classifier_checkpoint_loads_its_head(tmp_path):
    """A TF1 checkpoint as run_classifier saves it (`output_weights` [K, H]) without labels."""
    model = BertClassifier.from_checkpoint(hf_folder(tmp_path, "sequence_single"))
    weights = checkpoint.get_original_weights(model.original_weight_map())
    checkpoint.write(weights, model.config, tmp_path / "tf1", "tf1", FIXTURES / "vocab.txt")
    restored = BertClassifier.from_checkpoint(tmp_path / "tf1")
    assert restored.labels is None and restored.num_classes == 3
    check_against_transformers(restored, "sequence_single")


def test_a_head_of_another_kind_is_not_taken(tmp_path):
    with pytest.warns(UserWarning, match="holds a BertForQuestionAnswering head, not a BertClassifier"):
        model = BertClassifier.from_checkpoint(hf_folder(tmp_path, "question_answering"), num_classes=2)
    assert model.num_classes == 2 and model.labels is None
    with pytest.raises(ValueError, match="trained BertClassifier head with num_classes=3, not 5"):
        BertClassifier.from_checkpoint(hf_folder(tmp_path, "sequence_single"), num_classes=5)
    fresh = BertClassifier.from_checkpoint(hf_folder(tmp_path, "sequence_single"), num_classes=5, new_head=True)
    assert fresh.num_classes == 5 and fresh.labels is None


def test_loads_draw_only_what_the_checkpoint_lacks(tmp_path, monkeypatch):
    """Loads build their models in `compat.draws_deferred` blocks: what the checkpoint lacks (a
    token-classification folder's pooler, a new head) is drawn after the load, and holds the
    values a load that drew every variable first gives from the same seed; a tensor the
    checkpoint holds as zeros stays zeros."""
    token = hf_folder(tmp_path, "token")
    encoder = BertEncoder.from_checkpoint(token)
    encoder.embeddings.token_type_embeddings.assign(np.zeros(encoder.embeddings.token_type_embeddings.shape))
    save_checkpoint(encoder, tmp_path / "zero_types", "hf")

    def loads():
        keras.utils.set_random_seed(7)
        with pytest.warns(UserWarning, match="starting them from new initial values"):
            pooled = BertEncoder.from_checkpoint(token)
        with pytest.warns(UserWarning, match="holds a BertForTokenClassification head, not a BertClassifier"):
            classifier = BertClassifier.from_checkpoint(token, num_classes=3)
        return pooled, classifier, BertEncoder.from_checkpoint(tmp_path / "zero_types")

    deferred = loads()
    for module in (saving, head_loading):
        monkeypatch.setattr(module, "draws_deferred", contextlib.nullcontext)
    drawn_first = loads()
    for ours, theirs in zip(deferred, drawn_first):
        assert [w.path for w in ours.weights] == [w.path for w in theirs.weights]
        for mine, reference in zip(ours.get_weights(), theirs.get_weights()):
            np.testing.assert_array_equal(mine, reference)
    pooled, classifier, zero_types = deferred
    assert np.abs(pooled.pooler.get_weights()[0]).max() > 0.01  # drawn, not left at zero
    assert np.abs(classifier.get_weights()[-2]).max() > 0.01
    assert not np.any(zero_types.embeddings.token_type_embeddings.numpy())


def test_pytorch_pickles_only_get_a_conversion_command(tmp_path):
    folder = tmp_path / "pt"
    folder.mkdir()
    shutil.copy(FIXTURES / "sequence_single/config.json", folder)
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not read")
    with pytest.raises(
        ValueError, match=r"pytorch_model.bin.*save_pretrained\(sys.argv\[2\], safe_serialization=True\)"
    ):
        BertClassifier.from_checkpoint(folder)


@pytest.mark.slow
def test_exported_classifier_serves_the_checkpoint_labels(tmp_path):
    from bert_keras.serving.export import export_for_serving

    model = BertClassifier.from_checkpoint(hf_folder(tmp_path, "sequence_single"))
    export_for_serving(model, model.preprocessor, tmp_path / "export", version=1)
    served = tf.saved_model.load(str(tmp_path / "export" / "1"))
    outputs = served.signatures["serving_default"](text=tf.constant(["the quick brown fox jumps over the lazy dog"]))
    expected = REFERENCES["sequence_single/logits"][0]
    assert outputs["labels"].numpy()[0].decode() == LABELS["sequence_single"][int(np.argmax(expected))]
    assert_close(outputs["logits"][0], expected)


def test_multi_label_export_names_every_predicted_class(tmp_path):
    model = BertClassifier.from_checkpoint(hf_folder(tmp_path, "sequence_multi"))
    signature = model.serving_signature(model.preprocessor, model.labels)
    outputs = signature.from_ids({k: tf.constant(v) for k, v in packed("sequence_multi").items()}, model)
    expected = REFERENCES["sequence_multi/logits"]
    np.testing.assert_array_equal(outputs["predicted"], (expected > 0).astype(np.int32))
    names = np.where(expected > 0, np.array(LABELS["sequence_multi"]), "")
    np.testing.assert_array_equal(outputs["labels"].numpy().astype(str), names)
    assert_close(outputs["probabilities"], 1 / (1 + np.exp(-expected)))


def test_tokenizer_config_and_vocab_travel_with_a_pretrainer_export(tmp_path):
    model = BertPretrainer.from_checkpoint(hf_folder(tmp_path, "masked_lm"))
    save_checkpoint(model, tmp_path / "out", "hf")
    assert json.loads((tmp_path / "out/config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    assert (tmp_path / "out/vocab.txt").exists()


def docs_block(containing):
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if containing in b]
    return block


@pytest.mark.slow
@pytest.mark.parametrize("block, fixture", [("BertClassifier", "sequence_single"), ("BertReranker", "cross_encoder")])
def test_docs_snippets_run(tmp_path, monkeypatch, block, fixture):
    """docs/checkpoints.md's examples, on the fixture folders under the names they use."""
    hf_folder(tmp_path, fixture).rename(
        tmp_path / ("my-classifier" if fixture == "sequence_single" else "my-cross-encoder")
    )
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(docs_block(f"from bert_keras import {block}"), namespace)
    if fixture == "sequence_single":
        assert namespace["model"].labels == LABELS["sequence_single"]
        assert (tmp_path / "my-classifier-tf1/labels.txt").read_text().split() == LABELS["sequence_single"]
    else:
        hits = namespace["hits"]
        assert sorted(hit["corpus_id"] for hit in hits) == [0, 1] and hits[0]["score"] >= hits[1]["score"]
        assert (tmp_path / "my-cross-encoder-copy/config.json").exists()

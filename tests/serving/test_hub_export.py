"""The TF Hub-style pair (`bert-keras export --hub-style`) against the interface its users rely on.

Test vectors come from Model Garden's tests of its own exporter, tensorflow/models
official/nlp/tools/export_tfhub_lib_test.py (`test_exported_callables`,
`test_cased_length10`, `test_reexport`, `test_export_model_with_mlm` and its dropout
check); the fine-tuning run follows TensorFlow's BERT tutorials (tests/serving/hub_tutorial_runs.py).
Model Garden's vocabularies have no `[MASK]` unless asked; ours needs one, so `[MASK]`
is id 4 here and every other token id is one above Model Garden's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, REFERENCE, require

from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.models.encoder import INPUT_NAMES
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.serving.hub_export import export_hub_style, save_preprocess
from bert_keras.serving.ops import check_serving_ops
from bert_keras.serving.tfserving.session import SessionPredictor
from bert_keras_cli.cli import main as cli

pytestmark = pytest.mark.slow  # most tests here take over 3 CPU-seconds (docs/development.md)

ROOT = Path(__file__).resolve().parents[2]
RUNS = Path(__file__).resolve().parent / "hub_tutorial_runs.py"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TUTORIAL_VOCAB = SPECIAL + [
    "the",
    "quick",
    "brown",
    "fox",
    "##es",
    "jump",
    "##s",
    ",",
    ".",
    "!",
    "a",
    "b",
    "c",
    "good",
    "bad",
    "over",
]


def tiny_encoder(vocab_size, dropout=0.1):
    return BertEncoder(
        BertConfig(
            vocab_size=vocab_size,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
        )
    )


def export_preprocess(folder, vocab, lower_case=True, seq_length=128):
    preprocessor = BertPreprocessor(BertTokenizer(SPECIAL + vocab, lower_case=lower_case), seq_length=seq_length)
    save_preprocess(preprocessor, folder / "preprocess")
    return preprocessor, tf.saved_model.load(str(folder / "preprocess")), folder / "preprocess"


@pytest.fixture(scope="module")
def garden_preprocess(tmp_path_factory):
    """The preprocess model on the vocabulary of Model Garden's `test_exported_callables`."""
    return export_preprocess(tmp_path_factory.mktemp("garden"), ["d", "ef", "abc", "xy"])


@pytest.fixture(scope="module")
def tutorial_pair(tmp_path_factory):
    """A tiny random encoder (dropout 0.1) and its hub-style pair."""
    encoder = tiny_encoder(len(TUTORIAL_VOCAB))
    preprocessor = BertPreprocessor(BertTokenizer(TUTORIAL_VOCAB), seq_length=16)
    paths = export_hub_style(encoder, preprocessor, tmp_path_factory.mktemp("hub"))
    return encoder, preprocessor, *paths


def mask_inputs(word_ids):
    word_ids = np.asarray(word_ids, np.int32)
    return {
        "input_word_ids": word_ids,
        "input_mask": (word_ids > 0).astype(np.int32),
        "input_type_ids": np.zeros_like(word_ids),
    }


def test_preprocess_model_garden_callables(garden_preprocess):
    """export_tfhub_lib_test.test_exported_callables (BertTokenizer case)."""
    _, preprocess, path = garden_preprocess
    inputs = tf.constant(["abc d ef", "ABC D EF d"])
    token_ids = preprocess.tokenize(inputs)
    assert token_ids.merge_dims(1, 2).to_list() == [[7, 5, 6], [7, 5, 6, 5]]
    special = {k: v.numpy().item() for k, v in preprocess.tokenize.get_special_tokens_dict().items()}
    assert special == dict(padding_id=0, start_of_sequence_id=2, end_of_segment_id=3, mask_id=4, vocab_size=9)
    assert all(v.dtype == tf.int32 for v in preprocess.tokenize.get_special_tokens_dict().values())

    ids, starts, limits = preprocess.tokenize_with_offsets(inputs)
    assert ids.merge_dims(1, 2).to_list() == [[7, 5, 6], [7, 5, 6, 5]]
    assert starts.merge_dims(1, 2).to_list() == [[0, 4, 6], [0, 4, 6, 9]]
    assert limits.merge_dims(1, 2).to_list() == [[3, 5, 8], [3, 5, 8, 10]]
    assert preprocess.tokenize.get_special_tokens_dict is preprocess.tokenize_with_offsets.get_special_tokens_dict

    bert_inputs = preprocess(inputs)
    assert bert_inputs["input_word_ids"].shape == (2, 128)
    np.testing.assert_array_equal(
        bert_inputs["input_word_ids"][:, :10], [[2, 7, 5, 6, 3, 0, 0, 0, 0, 0], [2, 7, 5, 6, 5, 3, 0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
        bert_inputs["input_mask"][:, :10], [[1, 1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(bert_inputs["input_type_ids"], np.zeros((2, 128)))

    token_ids_2 = preprocess.tokenize(tf.constant(["d xy", "xy abc"]))
    expected_ids = [[2, 7, 5, 6, 3, 5, 8, 3, 0, 0], [2, 7, 5, 6, 5, 3, 8, 7, 3, 0]]
    expected_types = [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1, 1, 0]]
    # seq_length as the Python int of the original test, as a scalar tensor, and ragged rank 1.
    for segments, seq_length in (
        ([token_ids, token_ids_2], 256),
        ([token_ids, token_ids_2], tf.constant(256)),
        ([token_ids.merge_dims(1, 2), token_ids_2.merge_dims(1, 2)], 256),
    ):
        bert_inputs = preprocess.bert_pack_inputs(segments, seq_length=seq_length)
        assert bert_inputs["input_word_ids"].shape == (2, 256)
        np.testing.assert_array_equal(bert_inputs["input_word_ids"][:, :10], expected_ids)
        np.testing.assert_array_equal(bert_inputs["input_mask"][:, :10], np.array(expected_ids) > 0)
        np.testing.assert_array_equal(bert_inputs["input_type_ids"][:, :10], expected_types)
    assert check_serving_ops(path, "2.12")


def test_preprocess_model_garden_cased_length10_and_reexport(tmp_path):
    """export_tfhub_lib_test.test_cased_length10 and test_reexport."""
    _, preprocess, path = export_preprocess(tmp_path, ["d", "##ef", "abc", "ABC"], lower_case=False, seq_length=10)
    inputs = tf.constant(["abc def", "ABC DEF"])
    token_ids = preprocess.tokenize(inputs)
    assert token_ids.to_list() == [[[7], [5, 6]], [[8], [1]]]
    np.testing.assert_array_equal(
        preprocess(inputs)["input_word_ids"], [[2, 7, 5, 6, 3, 0, 0, 0, 0, 0], [2, 8, 1, 3, 0, 0, 0, 0, 0, 0]]
    )
    token_ids_2 = preprocess.tokenize(tf.constant(["d ABC", "ABC abc"]))
    bert_inputs = preprocess.bert_pack_inputs([token_ids, token_ids_2])  # the default seq_length=10
    np.testing.assert_array_equal(
        bert_inputs["input_word_ids"], [[2, 7, 5, 6, 3, 5, 8, 3, 0, 0], [2, 8, 1, 3, 8, 7, 3, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
        bert_inputs["input_type_ids"], [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 0, 0, 0]]
    )

    again = tmp_path / "reexport"
    tf.saved_model.save(preprocess, str(again))
    del preprocess
    np.testing.assert_array_equal(
        tf.saved_model.load(str(again))(inputs)["input_word_ids"],
        [[2, 7, 5, 6, 3, 0, 0, 0, 0, 0], [2, 8, 1, 3, 0, 0, 0, 0, 0, 0]],
    )


def test_bert_pack_inputs_segments_lengths_and_errors(garden_preprocess):
    preprocessor, preprocess, _ = garden_preprocess
    words = preprocess.tokenize(tf.constant(["abc d ef xy", "d", ""]))
    for count in (1, 2, 3):
        for seq_length in (5, 64, tf.constant(7)):
            packed = preprocess.bert_pack_inputs([words] * count, seq_length=seq_length)
            expected = preprocessor.bert_pack_inputs([words] * count, int(seq_length))
            eager = preprocessor.bert_pack_inputs([words] * count, tf.constant(int(seq_length)))
            for name in INPUT_NAMES:
                np.testing.assert_array_equal(packed[name], expected[name])
                np.testing.assert_array_equal(eager[name], expected[name])
    with pytest.raises(tf.errors.InvalidArgumentError, match="seq_length leaves no room for .CLS. and 3 .SEP."):
        preprocess.bert_pack_inputs([words] * 3, seq_length=tf.constant(3))
    with pytest.raises(ValueError, match="matching"):  # only 1..3 segments are traced
        preprocess.bert_pack_inputs([words] * 4, seq_length=64)


def test_preprocess_ids_equal_the_original_tokenizer(tmp_path):
    """Hub `tokenize` on the reference texts == google-research/bert FullTokenizer ids;
    the default signature, run by the TF1 session loader, packs them as [CLS] ids [SEP]."""
    tokenizer = BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")), lower_case=True)
    preprocess_path = tmp_path / "preprocess"
    save_preprocess(BertPreprocessor(tokenizer, seq_length=512), preprocess_path)
    rows = [
        json.loads(line)
        for line in require(REFERENCE / "tokenization_uncased.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    preprocess = tf.saved_model.load(str(preprocess_path))
    words = preprocess.tokenize(tf.constant([row["text"] for row in rows]))
    assert words.merge_dims(1, 2).to_list() == [row["ids"] for row in rows]
    short = [row for row in rows if len(row["ids"]) <= 510][:64]
    served = SessionPredictor(preprocess_path, replay_warmup=False).predict_texts(text=[row["text"] for row in short])
    for packed, mask, row in zip(served["input_word_ids"], served["input_mask"], short):
        assert packed[: mask.sum()].tolist() == [tokenizer.cls_id, *row["ids"], tokenizer.sep_id]


def test_encoder_is_a_reusable_saved_model(tutorial_pair):
    """The reusable SavedModel API: callable with `training`, each variable tracked once;
    outputs as the Keras encoder; TF Serving's loader runs its signature."""
    encoder, preprocessor, _, path = tutorial_pair
    inputs = preprocessor(tf.constant(["the quick brown fox", "bad"]))
    expected = encoder(inputs)
    loaded = tf.saved_model.load(str(path))
    assert callable(loaded) and len(loaded.regularization_losses) == 0
    weights = [w.numpy() for w in encoder.trainable_weights]
    assert len(loaded.trainable_variables) == len(weights)
    for variable in loaded.trainable_variables:  # each weight exactly once
        index = next(i for i, w in enumerate(weights) if w.shape == variable.shape and np.array_equal(w, variable))
        weights.pop(index)
    # Trainable weights plus the dropout seed states; each stored once in the checkpoint.
    assert len(loaded.variables) == len(encoder.variables)
    stored = tf.train.list_variables(str(path / "variables" / "variables"))
    assert sum(int(np.prod(shape)) for name, shape in stored if name != "_CHECKPOINTABLE_OBJECT_GRAPH") == sum(
        int(np.prod(v.shape)) for v in encoder.variables
    )

    outputs = loaded(inputs)
    assert sorted(outputs) == ["default", "encoder_outputs", "pooled_output", "sequence_output"]
    assert isinstance(outputs["encoder_outputs"], list) and len(outputs["encoder_outputs"]) == 2
    np.testing.assert_allclose(outputs["pooled_output"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_array_equal(outputs["default"], outputs["pooled_output"])
    for layer, reference in zip(outputs["encoder_outputs"], expected["encoder_outputs"]):
        np.testing.assert_allclose(layer, reference, atol=1e-5)

    def dropout_mean_stddev(training, runs=20):  # Model Garden's dropout check
        ids = np.array([[14, 12, 20, 15, 19]], np.int32)
        pooled = np.concatenate([loaded(mask_inputs(ids), training=training)["pooled_output"] for _ in range(runs)])
        return np.mean(np.std(pooled, axis=0))

    assert dropout_mean_stddev(training=False) < 1e-6
    assert dropout_mean_stddev(training=True) > 1e-3

    shapes = []  # Model Garden's check that a static seq_length propagates through the call

    @tf.function
    def record_shapes(inputs):
        shapes.append(tf.nest.map_structure(lambda tensor: tensor.shape.as_list(), loaded(inputs)))

    record_shapes.get_concrete_function({name: tf.TensorSpec([None, 10], tf.int32) for name in INPUT_NAMES})
    assert shapes[0]["sequence_output"] == [None, 10, 16] and shapes[0]["pooled_output"] == [None, 16]

    served = SessionPredictor(path, replay_warmup=False).predict_texts(**{k: v.numpy() for k, v in inputs.items()})
    np.testing.assert_allclose(served["pooled_output"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(served["default"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(served["encoder_outputs_1"], expected["encoder_outputs"][1], atol=1e-5)


def test_pretraining_export_has_the_mlm_object(tmp_path):
    """`export --pretrainer --hub-style` of the reference checkpoint: `encoder.mlm` logits
    equal Hugging Face BertForPreTraining's; the root keeps only the encoder's variables."""
    checkpoint = require(REFERENCE / "tiny_pretraining_tf1")
    reference = dict(np.load(require(REFERENCE / "tiny_pretraining_outputs.npz")))
    assert (
        cli(
            [
                "export",
                str(checkpoint),
                "--pretrainer",
                "--hub-style",
                "--vocab",
                str(DATA / "vocab" / "vocab.txt"),
                "--seq-length",
                "128",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    encoder = tf.saved_model.load(str(tmp_path / "encoder"))
    pretrainer = BertPretrainer.from_checkpoint(checkpoint)
    features = {name: reference[name].astype(np.int32) for name in (*INPUT_NAMES, "masked_lm_positions")}
    outputs = encoder.mlm(features)
    np.testing.assert_allclose(outputs["mlm_logits"], reference["mlm_logits_at_positions"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs["pooled_output"], reference["pooled_output"], atol=1e-5, rtol=0)
    assert len(outputs["encoder_outputs"]) == 2
    encoder_inputs = {name: features[name] for name in INPUT_NAMES}
    np.testing.assert_allclose(encoder(encoder_inputs)["pooled_output"], reference["pooled_output"], atol=1e-5, rtol=0)

    head = pretrainer.masked_lm_head.trainable_weights
    assert len(encoder.trainable_variables) == len(pretrainer.encoder.trainable_weights)
    assert len(encoder.mlm.trainable_variables) == len(pretrainer.encoder.trainable_weights) + len(head)
    root_ids = {id(v) for v in encoder.trainable_variables}
    assert root_ids < {id(v) for v in encoder.mlm.trainable_variables}, "mlm must share the encoder's variables"

    one = {name: value[:1] for name, value in features.items()}
    pooled = [encoder.mlm(one, training=True)["pooled_output"] for _ in range(2)]
    assert np.abs(pooled[0] - pooled[1]).max() > 1e-4, "training=True must run dropout"


def test_hub_tutorials_fine_tune_save_reload_and_serve(tmp_path, tutorial_pair):
    """TensorFlow's two BERT tutorials, run by tf-keras + tensorflow_hub in a subprocess."""
    encoder, preprocessor, preprocess_path, encoder_path = tutorial_pair
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run(
        [sys.executable, str(RUNS), str(preprocess_path), str(encoder_path), str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = np.load(tmp_path / "results.npz")

    assert (
        int(results["trainable_weights"])
        == int(results["loaded_trainable_variables"])
        == len(encoder.trainable_weights)
    )
    assert np.abs(results["encoder_after"] - results["encoder_before"]).max() > 1e-3, "fit did not train the encoder"
    assert float(results["difference_training_True"]) > 1e-3 and float(results["difference_training_False"]) == 0.0
    np.testing.assert_allclose(results["reloaded"], results["predictions"], atol=1e-6)
    np.testing.assert_allclose(results["reloaded_serving"], results["predictions"], atol=1e-6)
    # The fine-tuned classifier, saved by tf-keras, served by TF Serving's loader.
    from hub_tutorial_runs import PAIRS, TEXTS

    served = SessionPredictor(tmp_path / "classifier", replay_warmup=False).predict_texts(text=TEXTS)
    np.testing.assert_allclose(served["classifier"], results["predictions"], atol=1e-5)

    packed = preprocessor.bert_pack_inputs(
        [preprocessor.tokenize(tf.constant(segment)) for segment in PAIRS], seq_length=64
    )
    np.testing.assert_array_equal(results["glue_word_ids"], packed["input_word_ids"])
    np.testing.assert_array_equal(results["glue_type_ids"], packed["input_type_ids"])
    np.testing.assert_array_equal(results["glue_mask"], packed["input_mask"])
    row = [TUTORIAL_VOCAB.index(t) for t in ("[CLS]", "good", "[SEP]", "bad", ".", "[SEP]")]
    assert results["glue_word_ids"][1].tolist() == row + [0] * 58
    np.testing.assert_allclose(results["glue_pooled"], encoder(packed)["pooled_output"], atol=1e-5)


@pytest.mark.slow
def test_minilm_hub_pair_matches_hugging_face(tmp_path, minilm_dir):
    """Real weights: hub preprocess ids and hub encoder outputs == the Hugging Face reference."""
    ref = np.load(require(REFERENCE / "minilm_l6_encoder.npz"))
    texts = json.loads(require(REFERENCE / "minilm_l6_encoder_inputs.json").read_text())
    preprocessor = BertPreprocessor(BertTokenizer(minilm_dir / "vocab.txt", lower_case=True), seq_length=128)
    preprocess_path, encoder_path = export_hub_style(BertEncoder.from_checkpoint(minilm_dir), preprocessor, tmp_path)
    preprocess, encoder = tf.saved_model.load(str(preprocess_path)), tf.saved_model.load(str(encoder_path))
    singles = [i for i, t in enumerate(texts) if t["text_b"] is None]
    pairs = [i for i, t in enumerate(texts) if t["text_b"] is not None]
    for rows, segments in ((singles, ["text_a"]), (pairs, ["text_a", "text_b"])):
        tokenized = [preprocess.tokenize(tf.constant([texts[i][name] for i in rows])) for name in segments]
        packed = preprocess.bert_pack_inputs(tokenized, seq_length=128)
        for name in INPUT_NAMES:
            np.testing.assert_array_equal(packed[name], ref[name][rows])
        outputs = encoder(packed)
        np.testing.assert_allclose(outputs["pooled_output"], ref["pooled_output"][rows], atol=1e-5)
        mask = ref["input_mask"][rows].astype(bool)
        np.testing.assert_allclose(
            outputs["sequence_output"].numpy()[mask], ref["sequence_output"][rows][mask], atol=2e-5
        )


def test_keras3_tfsm_layer_runs_the_encoder_for_inference(tutorial_pair):
    """What Keras 3's TFSMLayer does with the export (see docs/serving.md): `__call__` as its call
    endpoint gives inference; it never passes `training`, so dropout stays off."""
    encoder, preprocessor, preprocess_path, path = tutorial_pair
    layer = keras.layers.TFSMLayer(str(path), call_endpoint="__call__")
    assert len(layer.trainable_weights) == len(encoder.trainable_weights)
    inputs = preprocessor(tf.constant(["the quick brown fox", "bad"]))
    np.testing.assert_allclose(layer(inputs)["pooled_output"], encoder(inputs)["pooled_output"], atol=1e-5)
    np.testing.assert_array_equal(
        layer(inputs, training=True)["pooled_output"], layer(inputs, training=True)["pooled_output"]
    )
    with pytest.raises(TypeError, match="positional"):  # signatures take keyword arguments only
        keras.layers.TFSMLayer(str(path), call_endpoint="serving_default")(inputs)
    preprocess = keras.layers.TFSMLayer(str(preprocess_path), call_endpoint="__call__")
    np.testing.assert_array_equal(
        preprocess(tf.constant(["the quick brown fox", "bad"]))["input_word_ids"], inputs["input_word_ids"]
    )

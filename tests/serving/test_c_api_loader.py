"""Every export kind, loaded by TF Serving's C++ loader through the C API, answers as Keras does.

`TF_LoadSessionFromSavedModel` wraps `tensorflow::LoadSavedModel` (tensorflow/tensorflow:
tensorflow/c/c_api.cc), which tensorflow_model_server calls to load a version
(tensorflow/serving: tensorflow_serving/session_bundle/oss/session_bundle_util.cc, used by
tensorflow_serving/servables/tensorflow/saved_model_bundle_factory.cc). A failed warm-up
request fails the load there (servables/tensorflow/saved_model_warmup_util.cc); so it does
here. The loader's process registers only the tf.text op libraries TF Serving 2.12 links.
"""

import dataclasses
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from harness import BAD_TEXTS, SERVING_VOCAB, VARIED_TEXTS

from bert_keras import (
    BertClassifier,
    BertConfig,
    BertEncoder,
    BertFeatureExtractor,
    BertMultipleChoice,
    BertPreprocessor,
    BertPretrainer,
    BertSpanLabeler,
    BertTokenClassifier,
    BertTokenizer,
)
from bert_keras.serving import export
from bert_keras.serving.hub_export import export_hub_style
from bert_keras.serving.ops import check_serving_ops
from bert_keras.serving.tfserving import c_api_loader
from bert_keras.serving.tfserving.c_api_loader import CApiError, CApiPredictor, build, serving_op_libraries
from bert_keras.serving.tfserving.session import ServingError, SessionPredictor, make_request
from bert_keras.tasks.multiple_choice import pack_choices

needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None, reason="gcc is not on PATH: the C-API loader cannot be compiled"
)

MAX_SEQ_LENGTH = 64
# Empty, blank, 1 MB, invalid UTF-8, NUL, emoji/CJK/RTL and special-token texts, then enough
# texts of varied lengths for several length-sorted micro-batches.
TEXTS = [t if isinstance(t, bytes) else t.encode() for t in BAD_TEXTS + ["the [MASK] fox!", "中 [MASK] 文"]]
TEXTS += [t.encode() for t in VARIED_TEXTS]
CONFIG = BertConfig(
    vocab_size=len(SERVING_VOCAB),
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=MAX_SEQ_LENGTH,
)


def fill_mask_outputs(model, packed):
    """Top-3 fillers of each [MASK], from the Keras model's MLM logits."""
    is_mask = packed["input_word_ids"].numpy() == SERVING_VOCAB.index("[MASK]")
    positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(is_mask.shape[1]), is_mask.shape), is_mask)
    logits = model({**packed, "masked_lm_positions": positions.to_tensor()})["mlm_logits"]
    top = tf.math.top_k(tf.nn.softmax(logits), k=3)
    valid = tf.sequence_mask(positions.row_lengths(), tf.shape(logits)[1])[:, :, None]
    return {"top_probabilities": tf.where(valid, top.values, 0.0), "top_ids": tf.where(valid, top.indices, -1)}


# kind -> (model builder, string inputs, labels, the Keras model's outputs for packed ids)
KINDS = {
    "encoder": (
        lambda: BertEncoder(CONFIG),
        ("text",),
        None,
        lambda model, packed: {k: model(packed)[k] for k in ("pooled_output", "sequence_output")},
    ),
    "classifier": (
        lambda: BertClassifier(BertEncoder(CONFIG), num_classes=3),
        ("text_a", "text_b"),
        ["negative", "neutral", "positive"],
        lambda model, packed: {"logits": model(packed)},
    ),
    "regression": (
        lambda: BertClassifier(BertEncoder(CONFIG), num_classes=1),
        ("text",),
        None,
        lambda model, packed: {"score": model(packed)[:, 0]},
    ),
    "tagger": (
        lambda: BertTokenClassifier(BertEncoder(CONFIG), num_classes=3),
        ("text",),
        ["O", "B-PER", "B-LOC"],
        lambda model, packed: {"logits": model(packed)},
    ),
    "span": (
        lambda: BertSpanLabeler(BertEncoder(CONFIG)),
        ("question", "context"),
        None,
        lambda model, packed: model(packed),
    ),
    "fill_mask": (lambda: BertPretrainer(BertEncoder(CONFIG)), ("text",), None, fill_mask_outputs),
    "features": (
        lambda: BertFeatureExtractor(BertEncoder(CONFIG), layers=(-1, -2)),
        ("text",),
        None,
        lambda model, packed: model(packed),
    ),
    "multiple_choice": (
        lambda: BertMultipleChoice(BertEncoder(CONFIG)),
        ("question", "choices"),
        None,
        lambda model, packed: {"scores": model(packed)},
    ),
}
# Kinds whose text signature returns the model's outputs on the packed text unchanged.
PLAIN_KINDS = ("encoder", "classifier", "regression", "features", "multiple_choice")


def visible_weights(model):
    """Weights ~ N(0, 0.5): BERT's 0.02 initializer keeps every head's outputs within 1e-5
    of each other whatever the text, which would hide a wrong input."""
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0.0, 0.5, weight.shape).astype("float32") for weight in model.get_weights()])
    return model


def preprocessor(seq_length=None):
    return BertPreprocessor(BertTokenizer(SERVING_VOCAB), seq_length=seq_length, max_seq_length=MAX_SEQ_LENGTH)


def text_inputs(segments, texts):
    """Each segment gets the texts in a different order, so pairs mix lengths and kinds;
    multiple choice gets two `choices` per row."""
    rotated = [np.array(texts[i:] + texts[:i], dtype=object if texts else bytes) for i in range(len(segments) + 1)]
    return {
        name: np.stack(rotated[i : i + 2], axis=1) if name == "choices" else rotated[i]
        for i, name in enumerate(segments)
    }


def pack(kind, packer, inputs):
    """The packed ids of a request, as the Keras model takes them."""
    segments = tuple(tf.constant(inputs[name], tf.string) for name in KINDS[kind][1])
    if kind == "multiple_choice":
        return pack_choices(packer, segments)
    return packer(segments)


@pytest.fixture(scope="module", params=list(KINDS))
def served(request, tmp_path_factory):
    """(kind, Keras model, preprocessor, TF1-loader predictor, C-API predictor) of one export kind."""
    build, segments, labels, _ = KINDS[request.param]
    model, packer = visible_weights(build()), preprocessor()
    path = export.export_for_serving(
        model, packer, tmp_path_factory.mktemp(request.param), segments=segments, labels=labels, top_k=3
    )
    session = SessionPredictor(path, replay_warmup=False)
    with CApiPredictor(path, serving_release="2.12") as predictor:
        yield request.param, model, packer, session, predictor
    session.close()


def assert_outputs_equal(actual, expected):
    """Same names; floats within 1e-5, everything else (ids, strings, shapes) identical."""
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        value = np.asarray(value)
        if value.dtype.kind == "f":
            assert actual[key].dtype == np.float32, key
            np.testing.assert_allclose(actual[key], value, atol=1e-5, rtol=0, err_msg=key)
        else:
            np.testing.assert_array_equal(actual[key], value, err_msg=key)


def assert_close_to_keras(actual, expected, input_mask):
    """Within 1e-5 of the Keras model's outputs; per-token outputs at real tokens only (a
    micro-batch pads only to its own length; span logits put -1e4 on padding)."""
    mask = input_mask.numpy()
    for key, value in expected.items():
        value, got = np.asarray(value), actual[key]
        if value.shape[:2] == mask.shape:
            value, got = value[mask == 1], got[mask == 1]
        np.testing.assert_allclose(got, value, atol=1e-5, rtol=0, err_msg=key)


@pytest.mark.slow
@needs_gcc
def test_raw_text_signature_equals_keras(served):
    """Every output (texts, tags, answers, tokens) as the TF1 loader with all tf.text ops
    gives it; the encoder and classifier outputs also as the Keras model computes them."""
    kind, model, packer, session, predictor = served
    segments = KINDS[kind][1]
    for texts in ([], TEXTS):
        inputs = text_inputs(segments, texts)
        out = predictor.predict(**inputs)
        assert_outputs_equal(out, session.predict_texts(**inputs))
    if kind in PLAIN_KINDS:
        packed = pack(kind, packer, inputs)
        assert_close_to_keras(out, KINDS[kind][3](model, packed), packed["input_mask"])


@pytest.mark.slow
@needs_gcc
def test_ids_signature_equals_keras(served):
    kind, model, packer, session, predictor = served
    segments = KINDS[kind][1]
    packed = pack(kind, packer, text_inputs(segments, TEXTS))
    ids = {key: value.numpy() for key, value in packed.items()}
    out = predictor.predict("serve_ids", **ids)
    assert_outputs_equal(out, session.predict_texts("serve_ids", **ids))
    assert_close_to_keras(out, KINDS[kind][3](model, packed), packed["input_mask"])


@needs_gcc
@pytest.mark.parametrize("served", ["encoder"], indirect=True)
def test_warmup_replayed_and_errors_named(served):
    _, model, packer, _, predictor = served
    assert len(predictor.warmup_outputs) == 2, "the warm-up file was not replayed"
    expected = model(packer(tf.constant(export.DEFAULT_WARMUP_TEXTS)))["pooled_output"]
    np.testing.assert_allclose(predictor.warmup_outputs[0]["pooled_output"], expected, atol=1e-5, rtol=0)
    with pytest.raises(ServingError, match="INVALID_ARGUMENT: input text must be string, got int32"):
        predictor.predict(text=np.array([1, 2], np.int32))
    with pytest.raises(ServingError, match='FAILED_PRECONDITION: Serving signature key "nope" not found'):
        predictor.predict("nope", text=["a"])
    with pytest.raises(ServingError, match="INVALID_ARGUMENT.*missing \\['text'\\], unexpected \\['txt'\\]"):
        predictor.predict(txt=["a"])
    with pytest.raises(ServingError, match="INVALID_ARGUMENT.*missing \\['text'\\], unexpected \\[\\]"):
        predictor.predict()
    assert predictor.predict(text=["the fox"])["pooled_output"].shape == (1, 16), "the loader stopped serving"


@needs_gcc
@pytest.mark.parametrize("served", ["encoder"], indirect=True)
def test_export_needing_a_newer_op_fails_to_load(served):
    """TF Serving 2.9 links no FastWordpiece (tf.text 2.10): the warm-up fails, so the load does."""
    *_, predictor = served
    path = predictor.export_path
    libraries = {
        release: {Path(library).name for library in serving_op_libraries(build(), release)}
        for release in ("2.9", "2.12", "2.20")
    }
    assert "_fast_wordpiece_tokenizer.so" in libraries["2.12"] - libraries["2.9"]
    assert "_trimmer_ops.so" in libraries["2.20"] - libraries["2.12"], "RoundRobinTrim is linked only from 2.20"
    with pytest.raises(ValueError, match="FastWordpieceTokenizeWithOffsets"):
        check_serving_ops(path, "2.9")
    with pytest.raises(
        CApiError,
        match="(?s)warm-up.*Op type not registered 'FastWordpieceTokenizeWithOffsets'"
        ".*linked by TF Serving >= 2.10, not by the target release 2.9",
    ):
        CApiPredictor(path, serving_release="2.9")


@pytest.mark.slow
@needs_gcc
def test_tf_hub_style_pair_equals_keras(tmp_path):
    """Both SavedModels of the TF Hub pair, as TF Serving's loader runs them."""
    encoder, packer = visible_weights(BertEncoder(CONFIG)), preprocessor(seq_length=MAX_SEQ_LENGTH)
    preprocess_path, encoder_path = export_hub_style(encoder, packer, tmp_path)
    expected = packer(tf.constant(TEXTS))
    with CApiPredictor(preprocess_path) as predictor:
        assert_outputs_equal(predictor.predict(text=np.array(TEXTS, dtype=object)), expected)
    reference = encoder(expected)
    reference = {
        "pooled_output": reference["pooled_output"],
        "default": reference["pooled_output"],
        "sequence_output": reference["sequence_output"],
        **{f"encoder_outputs_{i}": layer for i, layer in enumerate(reference["encoder_outputs"])},
    }
    with CApiPredictor(encoder_path) as predictor:
        assert_outputs_equal(predictor.predict(**{key: value.numpy() for key, value in expected.items()}), reference)


def test_missing_compiler_is_named(monkeypatch):
    monkeypatch.setattr(c_api_loader.shutil, "which", lambda name: None)
    with pytest.raises(c_api_loader.NoCompiler, match="gcc is not on PATH"):
        c_api_loader.CApiPredictor("unused")


@needs_gcc
def test_compile_error_is_shown(monkeypatch, tmp_path):
    broken = tmp_path / "c_api_predict.c"
    broken.write_text("int main(void) { return undefined_name; }\n")
    monkeypatch.setattr(c_api_loader, "SOURCE", broken)
    with pytest.raises(
        c_api_loader.Unavailable, match="(?s)compiling c_api_predict.c failed.*undefined_name"
    ) as caught:
        c_api_loader.build(tmp_path / "cache")
    assert re.fullmatch(r"compiling c_api_predict.c failed: .*error: .*undefined_name.*", caught.value.reason)


def tiny_encoder_file(folder):
    """A tiny encoder's `.keras` file and its vocab.txt, for `bert-keras export`."""
    BertEncoder(dataclasses.replace(CONFIG, num_hidden_layers=1)).save(folder / "encoder.keras")
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in SERVING_VOCAB), encoding="utf-8")
    return [str(folder / "encoder.keras"), "--vocab", str(folder / "vocab.txt")]


@pytest.mark.slow
def test_export_whose_loader_cannot_be_built_is_written_with_the_check_skipped(tmp_path, monkeypatch, capsys):
    """A compiler that fails (not a missing one) and an empty build cache: the export is
    still written and loads; the C++ loader check is one `skipped` line with the reason."""
    from bert_keras_cli.cli import main

    (tmp_path / "bin").mkdir()
    gcc = tmp_path / "bin" / "gcc"
    gcc.write_text("#!/bin/sh\necho 'gcc: fatal error: cannot execute cc1: No such file or directory' >&2\nexit 1\n")
    gcc.chmod(0o755)
    (tmp_path / "cache").mkdir()  # $XDG_CACHE_HOME: c_api_loader.build caches under it, empty here
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["export", *tiny_encoder_file(tmp_path), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr()
    skipped = [line for line in out.out.splitlines() if "C++ loader check" in line]
    assert skipped == [
        "  C++ loader check skipped: compiling c_api_predict.c failed: "
        "gcc: fatal error: cannot execute cc1: No such file or directory"
    ], out.out
    assert "Traceback" not in out.err
    predictor = SessionPredictor(tmp_path / "m" / "1")
    try:
        outputs = predictor.predict(make_request("bert", "serving_default", {"text": ["the quick brown fox"]}))
    finally:
        predictor.close()
    assert tf.make_ndarray(outputs.outputs["pooled_output"]).shape == (1, CONFIG.hidden_size)
    assert not any((tmp_path / "cache").rglob("c_api_predict"))


@pytest.mark.slow
@needs_gcc
def test_a_loader_that_runs_and_disagrees_fails_the_export(monkeypatch, tmp_path):
    """The check built and ran: answers that differ from the session loader's fail the command."""
    from bert_keras_cli.cli import main

    replay_warmup = CApiPredictor.replay_warmup

    def off_by_one(self):
        return [
            {key: value + 1 if value.dtype.kind == "f" else value for key, value in outputs.items()}
            for outputs in replay_warmup(self)
        ]

    monkeypatch.setattr(CApiPredictor, "replay_warmup", off_by_one)
    with pytest.raises(CApiError, match="differs between TF Serving's C\\+\\+ loader and the TF1 session loader"):
        main(["export", *tiny_encoder_file(tmp_path), "--out", str(tmp_path / "m")])

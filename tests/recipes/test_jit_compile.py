"""XLA: every head that `finetune` and `distill` train takes an XLA train step and learns
under it what it learns without (the same weights from the same start); the recipes leave
"auto" to Keras (off on CPU, and with windows); the flags turn XLA on and off."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import TINY, tiny_preprocessor

from bert_keras import BertClassifier, BertEncoder, BertTextEmbedder, BertTokenClassifier
from bert_keras.recipes import finetune
from bert_keras.tasks.distillation import BertDistiller, student_of
from bert_keras.tasks.reranker import BertReranker
from bert_keras.tasks.span_labeler import BertSpanLabeler
from bert_keras.tasks.task import with_windows
from bert_keras_cli.cli import build_parser

NO_DROPOUT = dataclasses.replace(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# One layer for the heads: what XLA changes is in the head's step, and each layer's trace and
# compilation cost seconds. The distiller's teacher keeps two, for a student of one.
ONE_LAYER = dataclasses.replace(NO_DROPOUT, num_hidden_layers=1)
TEXTS = ["the film is good", "the film is bad", "a quick brown fox jumps", "the lazy dog", "it was good !", "bad"]
OTHERS = ["the dog", "a fox", "it was bad", "john lives in paris", "the cat", "good"]
LABELS = np.array([1, 0, 1, 0, 1, 0])


def classifier(config=ONE_LAYER):
    return BertClassifier(BertEncoder(config), num_classes=2, dropout=0.0, preprocessor=tiny_preprocessor())


def span_labeler():
    model = BertSpanLabeler(BertEncoder(ONE_LAYER), preprocessor=tiny_preprocessor())
    inputs = model.preprocessor((np.array(TEXTS), np.array(OTHERS)))
    return model, (inputs, {"start_logits": np.arange(6) % 4 + 1, "end_logits": np.arange(6) % 4 + 2})


def distiller():
    teacher = classifier(NO_DROPOUT)
    return BertDistiller(teacher, student_of(teacher, "teacher:1"), alpha=0.5), (TEXTS, LABELS)


HEADS = {  # each fine-tuning kind's head, and data for it
    "glue/tsv": lambda: (classifier(), (TEXTS, LABELS)),
    "glue pairs": lambda: (classifier(), ((TEXTS, OTHERS), LABELS)),
    "conll": lambda: (
        BertTokenClassifier(BertEncoder(ONE_LAYER), num_classes=3, dropout=0.0, preprocessor=tiny_preprocessor()),
        ([text.split() for text in TEXTS], [[len(word) % 3 for word in text.split()] for text in TEXTS]),
    ),
    "squad": span_labeler,
    "embedder": lambda: (
        BertTextEmbedder(BertEncoder(ONE_LAYER), preprocessor=tiny_preprocessor()),
        ((TEXTS, OTHERS),),
    ),
    "reranker": lambda: (
        BertReranker(BertEncoder(ONE_LAYER), dropout=0.0, preprocessor=tiny_preprocessor()),
        ((TEXTS, OTHERS), LABELS.astype("float32")),
    ),
    "distill": distiller,
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(HEADS))
def test_every_head_trains_under_xla_as_without(kind):
    weights = {}
    for jit_compile in (False, True):
        keras.utils.set_random_seed(0)
        model, data = HEADS[kind]()
        start = model.get_weights()
        # Without XLA is run eagerly: no graph to trace and optimize. Adam's epsilon 1e-5, not
        # 1e-7: a gradient zero in exact arithmetic (the span head's bias, under a softmax over
        # positions) would otherwise take a step of float noise over float noise, up to 1e-4.
        optimizer = keras.optimizers.Adam(1e-2, epsilon=1e-5)
        model.compile(optimizer=optimizer, jit_compile=jit_compile, run_eagerly=not jit_compile)
        assert model.jit_compile is jit_compile
        model.fit(*data, batch_size=6, epochs=1, shuffle=False, verbose=0)  # one step: one shape to compile
        weights[jit_compile] = model.get_weights()
    assert max(float(np.abs(a - b).max()) for a, b in zip(start, weights[True])) > 1e-3  # it trained
    for plain, xla in zip(weights[False], weights[True]):
        np.testing.assert_allclose(xla, plain, atol=2e-5)


def finetuned(model, data, **options):
    batches = tf.data.Dataset.from_tensor_slices(data).batch(3)
    run = finetune(model, batches, 6, lambda _: {"score": 0.0}, "score", batch_size=3, epochs=1, verbose=0, **options)
    return run.model


@pytest.mark.slow
def test_finetune_leaves_xla_to_keras_off_on_cpu_and_with_windows(tmp_path):
    data = (np.array(TEXTS), LABELS)
    assert not tf.config.list_physical_devices("GPU")
    assert finetuned(classifier(), data, output_dir=tmp_path / "default").jit_compile is False
    assert finetuned(classifier(), data, output_dir=tmp_path / "on", jit_compile=True).jit_compile is True
    windowed = with_windows(classifier(), doc_stride=2)
    assert finetuned(windowed, data, output_dir=tmp_path / "windows").jit_compile is False


@pytest.mark.parametrize(
    "command",
    [
        ["pretrain", "--vocab", "v", "--data", "d", "--output", "o", "--steps", "1"],
        ["finetune", "tsv", "--train", "t", "--dev", "t", "--output-dir", "o"],
        ["distill", "--teacher", "t", "--train", "t", "--output-dir", "o"],
    ],
)
def test_jit_compile_flags(command):
    parser = build_parser()
    assert parser.parse_args(command).jit_compile == "auto"
    assert parser.parse_args([*command, "--jit-compile"]).jit_compile is True
    assert parser.parse_args([*command, "--no-jit-compile"]).jit_compile is False

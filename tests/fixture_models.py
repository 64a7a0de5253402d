"""The tiny models behind `tests/fixtures/*.keras`, built with weights set by formula.

Only public imports from `bert_keras` are used, so the same builders work before and
after modules move inside the package.
"""

import numpy as np

from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertPretrainer, BertTokenizer

FIXTURE_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "quick",
    "brown",
    "fox",
    "##es",
    "jump",
    "##s",
    "over",
    "lazy",
    "dog",
    ",",
    ".",
    "!",
    "a",
    "b",
]
CONFIG = BertConfig(
    vocab_size=len(FIXTURE_VOCAB),
    hidden_size=8,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=16,
)
TEXTS = ["the quick brown foxes jump", "a lazy dog!", "", "unknown words, b"]


def fixture_weights(shapes):
    """Deterministic, distinct values for each weight: a sine of its running index."""
    weights, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        weights.append((0.5 * np.sin(0.37 * np.arange(start, start + size) + 1.0)).reshape(shape).astype("float32"))
        start += size
    return weights


def with_fixture_weights(model):
    model.set_weights(fixture_weights([w.shape for w in model.get_weights()]))
    return model


def tiny_classifier():
    preprocessor = BertPreprocessor(BertTokenizer(FIXTURE_VOCAB), seq_length=12)
    return with_fixture_weights(BertClassifier(BertEncoder(CONFIG), num_classes=3, preprocessor=preprocessor))


def tiny_pretrainer():
    return with_fixture_weights(BertPretrainer(BertEncoder(CONFIG)))

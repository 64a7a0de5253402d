"""The activations a `BertConfig` names, against their formulas."""

import math

import numpy as np
from harness import max_diff

from bert_keras.layers.activations import ACTIVATIONS


def test_gelu_variants_follow_their_formulas():
    x = np.linspace(-6, 6, 101).astype("float32")
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert max_diff(ACTIVATIONS["gelu"](x), exact) <= 1e-6
    assert max_diff(ACTIVATIONS["gelu_tanh"](x), tanh) <= 1e-6
    assert max_diff(ACTIVATIONS["gelu_tanh"](x), exact) > 1e-4

"""The canonical form every weight file goes through: a dict from the original
google-research/bert variable names (`bert/encoder/layer_0/attention/self/query/kernel`,
...) to numpy arrays laid out as the original stores them ([in, out] kernels). Each
Keras model lists which canonical names fill each of its variables (its
`original_weight_map()`); the formats translate their own names to and from these.
"""

import re
import warnings

import keras
import numpy as np

# Names of head variables: everything an encoder ignores.
HEAD_NAMES = r"^(cls/|output_weights$|output_bias$)"
# The pooler, which BertForTokenClassification, BertForQuestionAnswering and
# BertForMaskedLM do not have: a model loaded from them starts a new one.
POOLER_NAMES = r"^bert/pooler/"


class Transposed:
    """A 2-D variable seen as its transpose, for weight maps of heads whose original
    layout is [out, in] (run_classifier's `output_weights`) while Keras' Dense is [in, out]."""

    def __init__(self, variable):
        self.variable = variable

    @property
    def shape(self):
        return tuple(reversed(self.variable.shape))

    @property
    def dtype(self):
        return self.variable.dtype

    @property
    def value(self):
        return keras.ops.transpose(self.variable.value)

    def assign(self, value):
        self.variable.assign(np.transpose(value))


def get_original_weights(weight_map):
    """The canonical {original name: array} of a model's weight map."""
    weights = {}
    for variable, names in weight_map:
        parts = np.split(keras.ops.convert_to_numpy(variable.value), len(names), axis=-1)
        weights.update(zip(names, parts))
    return weights


def set_original_weights(weight_map, weights, ignore=None, source="checkpoint", optional=None):
    """Assigns canonical weights; any missing, unexpected or mis-shaped name is an error.

    `ignore` is a regex of names that may be present but are not this model's (for
    example the `cls/` pre-training heads when loading an encoder alone); `optional`
    one of a part that may be missing as a whole (its variables keep their initial
    values, with a warning).
    """
    expected = {}
    for variable, names in weight_map:
        *outer, last = variable.shape
        for name in names:
            expected[name] = (*outer, last // len(names))
    part = {name for name in expected if optional and re.search(optional, name)}
    absent = sorted(part) if not part & set(weights) else []  # the whole part, or it is incomplete
    if absent:
        warnings.warn(f"{source} has no {absent}: starting them from new initial values", stacklevel=3)
        weight_map = [(variable, names) for variable, names in weight_map if names[0] not in absent]
        expected = {name: shape for name, shape in expected.items() if name not in absent}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(name for name in set(weights) - set(expected) if not (ignore and re.search(ignore, name)))
    mis_shaped = sorted(
        f"{name}: {source} has {tuple(weights[name].shape)}, model expects {expected[name]}"
        for name in set(expected) & set(weights)
        if tuple(weights[name].shape) != tuple(expected[name])
    )
    problems = []
    if missing:
        problems.append(f"missing from {source} ({len(missing)}): {missing}")
    if unexpected:
        problems.append(f"unexpected in {source} ({len(unexpected)}): {unexpected}")
    if mis_shaped:
        problems.append(f"shape mismatch ({len(mis_shaped)}): {mis_shaped}")
    if problems:
        raise ValueError("Checkpoint does not fit the model:\n  " + "\n  ".join(problems))
    for variable, names in weight_map:
        value = np.concatenate([np.asarray(weights[name]) for name in names], axis=-1)
        variable.assign(value.astype(variable.dtype))

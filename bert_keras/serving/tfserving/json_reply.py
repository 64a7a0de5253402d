"""Tensors -> JSON the way TF Serving's REST API writes its responses (tensorflow_serving/util/json_tensor.cc).

Floats in their shortest round-trip form, `NaN`/`Infinity` as bare tokens and outputs
named `*_bytes` as `{"b64": ...}`; strings' bytes that are not UTF-8 pass through unchanged.
"""

import base64
import math

import numpy as np

from bert_keras.serving.tfserving.json_tensor import dtype_name, invalid, show


def json_from_tensors(outputs, format):
    """`{name: ndarray}` -> the response text: `predictions` (row) or `outputs` (columnar)."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if format == "columnar":
        if len(names) == 1:
            return '{"outputs": ' + _tensor_json(names[0], outputs[names[0]]) + "}"
        return (
            '{"outputs": {' + ", ".join(f"{show(name)}: {_tensor_json(name, outputs[name])}" for name in names) + "}}"
        )
    batch = None
    for name in names:
        if outputs[name].ndim == 0:
            raise invalid(f"Tensor name: {name} has no shape information ")
        if batch is not None and outputs[name].shape[0] != batch:
            raise invalid(
                f"Tensor name: {name} has inconsistent batch size: {outputs[name].shape[0]} expecting: {batch}"
            )
        batch = outputs[name].shape[0]
    rows = {name: [_tensor_json(name, row) for row in outputs[name]] for name in names}
    if len(names) == 1:
        items = rows[names[0]]
    else:
        items = ["{" + ", ".join(f"{show(name)}: {rows[name][i]}" for name in names) + "}" for i in range(batch)]
    return '{"predictions": [' + ", ".join(items) + "]}"


def _tensor_json(name, array):
    as_bytes = name.endswith("_bytes")
    if not isinstance(array, np.ndarray):  # one row's scalar (np.asarray would strip a bytes' trailing NULs)
        return _scalar_json(array, as_bytes)
    return _nest([_scalar_json(value, as_bytes) for value in array.ravel()], array.shape)


def _nest(leaves, shape):
    if not shape:
        return leaves[0]
    step = len(leaves) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nest(leaves[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


def _scalar_json(value, as_bytes):
    if isinstance(value, bytes):
        if as_bytes:
            return '{"b64": "' + base64.b64encode(value).decode("ascii") + '"}'
        return show(value.decode("utf-8", "surrogateescape"))
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (np.floating, float)):
        return _decimal(value)
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    raise invalid(f"Failed to write JSON value for tensor type: {dtype_name(np.asarray(value).dtype)}")


def _decimal(value):
    """WriteDecimal: six significant digits unless they do not round-trip, whole numbers with '.0'."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    kind = np.float64 if isinstance(value, (np.float64, float)) else np.float32
    text = "%.6g" % value
    if kind(text) != value:
        text = "%.*g" % (17 if kind is np.float64 else 9, value)
    if "." not in text and "e" not in text:
        text += ".0"
    return text

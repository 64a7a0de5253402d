"""JSON -> tensors the way TF Serving's REST API converts them (`json_reply`: tensors -> JSON).

Follows tensorflow_serving/util/json_tensor.cc (tensorflow/serving): request values are
converted by the signature's input dtypes (strings as JSON strings or `{"b64": ...}`,
integers range-checked, floats refused where they would lose precision), `instances`
(row format) are batched from equal-shaped items, `inputs` (columnar) are taken as given;
responses write floats in their shortest round-trip form, `NaN`/`Infinity` as bare tokens
and outputs named `*_bytes` as `{"b64": ...}`. Errors are `ServingError`s in the
"CODE: message" form with TF Serving's texts, so clients see what the real server says.

Like rapidjson without encoding validation, bytes that are not UTF-8 inside JSON strings
pass through to the tensor unchanged (and back out in responses).
"""

import base64
import json
import math

import numpy as np
import tensorflow as tf

from bert_keras.serving.tfserving.session import ServingError

# rapidjson's wording (GetParseError_En) for the parse errors Python's json reports.
_PARSE_ERRORS = {
    "Expecting value": "Invalid value.",
    "Extra data": "The document root must not be followed by other values.",
    "Expecting property name enclosed in double quotes": "Missing a name for object member.",
    "Expecting ':' delimiter": "Missing a colon after a name of object member.",
    "Unterminated string starting at": "Missing a closing quotation mark in string.",
    "Invalid \\escape": "Invalid escape character in string.",
    "Invalid \\uXXXX escape": "Incorrect hex digit after \\u escape in string.",
    "Invalid control character at": "Invalid encoding in string.",
}
# TF's DataTypeString names where they differ from tf.DType.name.
_DTYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half"}
# Integer dtypes: the JSON integers each accepts (rapidjson IsInt/IsInt64/IsUint/IsUint64).
_INT_RANGES = {
    tf.int8: (-(2**31), 2**31 - 1),
    tf.int16: (-(2**31), 2**31 - 1),
    tf.int32: (-(2**31), 2**31 - 1),
    tf.uint8: (-(2**31), 2**31 - 1),
    tf.int64: (-(2**63), 2**63 - 1),
    tf.uint32: (0, 2**32 - 1),
    tf.uint64: (0, 2**64 - 1),
}
# Floats: the largest integer each holds exactly, and the largest finite value.
_FLOAT_LIMITS = {tf.float32: (2**24 - 1, float(np.finfo(np.float32).max)), tf.float64: (2**53 - 1, math.inf)}


def invalid(message):
    return ServingError(f"INVALID_ARGUMENT: {message}")


def dtype_name(dtype):
    name = tf.dtypes.as_dtype(dtype).name
    return _DTYPE_NAMES.get(name, name)


def show(value):
    """A JSON value as text for error messages (JsonValueToString)."""
    return json.dumps(value, ensure_ascii=False)


def encode(text):
    """JSON text -> response bytes; characters that stood for non-UTF-8 bytes become those bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate from a \uD8xx escape
        return text.encode("utf-8", "replace")


def parse_json(body):
    """Request bytes -> the top-level JSON object (ParseJson)."""
    if not body:
        raise invalid("JSON Parse error: The document is empty")
    text = body.decode("utf-8", "surrogateescape")
    if not text.strip():
        raise invalid(f"JSON Parse error: The document is empty. at offset: {len(text)}")
    try:
        doc = json.loads(text, object_pairs_hook=_first_member_wins)
    except json.JSONDecodeError as error:
        raise invalid(f"JSON Parse error: {_PARSE_ERRORS.get(error.msg, error.msg)} at offset: {error.pos}") from None
    except RecursionError:
        raise invalid("JSON Parse error: nested too deeply") from None
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {show(doc)} Is not object")
    return doc


def _first_member_wins(pairs):
    members = {}
    for key, value in pairs:
        members.setdefault(key, value)
    return members


def signature_name(doc):
    """The optional `signature_name` of a request object (FillSignature)."""
    name = doc.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid(f"JSON Value: {show(doc)} not formatted correctly. 'signature_name' key must be a string value.")
    return proto_text(name)


def proto_text(text):
    """`text` as a proto string field holds it: what is not UTF-8 as U+FFFD (it names nothing served)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def fill_predict_request(doc, signature_inputs, request):
    """Fills `request.inputs` from a parsed REST predict body; returns "row" or "columnar".

    `signature_inputs(name)` gives the named signature's input TensorInfo map (it raises
    for an unknown model, version or signature), as FillPredictRequestFromJson's callback.
    """
    request.model_spec.signature_name = signature_name(doc)
    infos = signature_inputs(request.model_spec.signature_name)
    if not infos:
        raise invalid(f"Failed to get input map for signature: {request.model_spec.signature_name or 'DEFAULT'}")
    dtypes = {name: tf.dtypes.as_dtype(info.dtype) for name, info in infos.items()}
    if "instances" in doc:
        if "inputs" in doc:
            raise invalid(
                f"JSON Value: {show(doc)} Not formatted correctly expecting only one of "
                "'inputs' or 'instances' keys to exist "
            )
        instances = doc["instances"]
        if not isinstance(instances, list):
            raise invalid(f"JSON Value: {show(doc)} Excepting 'instances' to be an list/array")
        if not instances:
            raise invalid(f"JSON Value: {show(doc)} No values in 'instances' array")
        tensors, format = _from_instances(instances, dtypes), "row"
    elif "inputs" in doc:
        tensors, format = _from_inputs(doc["inputs"], dtypes), "columnar"
    else:
        raise invalid("Missing 'inputs' or 'instances' key")
    for name, array in tensors.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(array, dtype=dtypes[name]))
    return format


def _is_b64(value):
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_named(value):
    return isinstance(value, dict) and not _is_b64(value)


def _from_instances(instances, dtypes):
    """Row format: every item gives one batch entry of each input, of one shape."""
    if not isinstance(instances[0], dict) and len(dtypes) > 1:
        raise invalid(
            "instances is a plain list, but expecting list of objects as multiple "
            "input tensors required as per tensorinfo_map"
        )
    named = _is_named(instances[0])
    names = sorted(dtypes)
    shapes, values = {}, {}
    for index, item in enumerate(instances):
        if named:
            if not _is_named(item):
                raise invalid(f"Expecting object but got list at item {index} of input list")
            for name, value in item.items():
                try:
                    _add_item(value, name, dtypes, shapes, values)
                except ServingError as error:
                    raise invalid(
                        f"Failed to process element: {index} key: {name} of 'instances' list. Error: {error}"
                    ) from None
            if set(item) != set(dtypes):
                raise invalid(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{show(item)} keys must be equal to: {','.join(names)}"
                )
        else:
            if _is_named(item):
                raise invalid(f"Expecting value/list but got object at item {index} of input list")
            try:
                _add_item(item, names[0], dtypes, shapes, values)
            except ServingError as error:
                raise invalid(f"Failed to process element: {index} of 'instances' list. Error: {error}") from None
    return {name: _array(values[name], [len(instances), *shapes[name]], dtypes[name]) for name in values}


def _add_item(item, name, dtypes, shapes, values):
    if name not in dtypes:
        raise invalid(f"JSON object: does not have named input: {name}")
    shape, leaves = _dense(item, dtypes[name])
    if name not in shapes:
        shapes[name], values[name] = shape, []
    elif math.prod(shapes[name]) != len(leaves):
        raise invalid(f"Expecting tensor size: {math.prod(shapes[name])} but got: {len(leaves)}")
    elif shapes[name] != shape:
        raise invalid(f"Expecting shape {_shape_text(shapes[name])} but got: {_shape_text(shape)}")
    values[name].extend(leaves)


def _from_inputs(inputs, dtypes):
    """Columnar format: each input is one whole tensor."""
    if not _is_named(inputs):
        if len(dtypes) > 1:
            raise invalid(
                "inputs is a plain value/list, but expecting an object as multiple "
                "input tensors required as per tensorinfo_map"
            )
        inputs = {next(iter(dtypes)): inputs}
    tensors = {}
    for name in sorted(dtypes):
        if name not in inputs:
            raise invalid(f"Missing named input: {name} in 'inputs' object.")
        shape, leaves = _dense(inputs[name], dtypes[name])
        tensors[name] = _array(leaves, shape, dtypes[name])
    return tensors


def _shape_text(shape):
    return "[" + ",".join(str(size) for size in shape) + "]"


def _dense(value, dtype):
    """(shape, leaf values) of a nested list, its shape read off the first elements."""
    shape, first = [], value
    while isinstance(first, list):
        shape.append(len(first))
        if not first:
            break
        first = first[0]
    leaves = []
    _fill(value, 0, shape, dtype, leaves)
    return shape, leaves


def _fill(value, level, shape, dtype, leaves):
    if not isinstance(value, list):
        if level != len(shape):
            raise invalid(
                f"JSON Value: {show(value)} found at incorrect level: {level + 1} "
                f"in the JSON DOM. Expected at level: {len(shape)}"
            )
        leaves.append(_leaf(value, dtype))
        return
    if level >= len(shape):
        raise invalid(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
    if len(value) != shape[level]:
        raise invalid(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected size: {shape[level]}"
        )
    for item in value:
        _fill(item, level + 1, shape, dtype, leaves)


def _json_type(value):
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return str(value)
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _type_error(value, dtype):
    return invalid(f"JSON Value: {show(value)} Type: {_json_type(value)} is not of expected type: {dtype_name(dtype)}")


def _leaf(value, dtype):
    """One JSON scalar (or b64 object) as a value of `dtype` (AddValueToTensor)."""
    if isinstance(value, dict):
        return _b64_leaf(value, dtype)
    if dtype == tf.string:
        if isinstance(value, str):
            return _utf8(value)
    elif dtype == tf.bool:
        if isinstance(value, bool):
            return value
    elif dtype in _FLOAT_LIMITS or dtype in _INT_RANGES:
        if _is_number_of(value, dtype):
            return value
    else:
        raise ServingError(f"UNIMPLEMENTED: Conversion of JSON Value: {show(value)} to type: {dtype_name(dtype)}")
    raise _type_error(value, dtype)


def _b64_leaf(value, dtype):
    """A `{"b64": ...}` object: the bytes of a string tensor."""
    if dtype != tf.string:
        raise _type_error(value, dtype)
    if not _is_b64(value):
        raise invalid(f"JSON Value: {show(value)} not formatted correctly for base64 data")
    return _b64decode(value["b64"])


def _utf8(text):
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a \uD8xx escape without its pair, refused by rapidjson's parser
        raise invalid("JSON Parse error: The surrogate pair in string is invalid.") from None


def _is_number_of(value, dtype):
    """Whether a JSON number is a value of the numeric `dtype`; a float that would lose precision is an error."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    if dtype in _FLOAT_LIMITS:
        if not _lossless(value, *_FLOAT_LIMITS[dtype]):
            raise invalid(f"Cannot convert JSON value: {show(value)} to {dtype_name(dtype)} without loss of precision.")
        return True
    low, high = _INT_RANGES[dtype]
    return isinstance(value, int) and low <= value <= high


def _lossless(value, max_int, max_float):
    if isinstance(value, int) and -(2**63) <= value < 2**64:
        return abs(value) <= max_int
    try:
        value = float(value)
    except OverflowError:  # rapidjson reads such an integer as an infinite double
        return True
    return not math.isfinite(value) or abs(value) <= max_float


def _b64decode(text):
    """absl::Base64Unescape: the standard alphabet, padding optional."""
    try:
        if len(text) % 4 == 1:
            raise ValueError(text)
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:
        raise invalid("Unable to base64 decode") from None


def _array(leaves, shape, dtype):
    if dtype == tf.string:
        array = np.empty(len(leaves), dtype=object)
        array[:] = leaves
    elif dtype in (tf.int8, tf.int16, tf.uint8):  # int_val holds them as int32, as TF Serving stores them
        array = np.array(leaves, dtype=np.int64).astype(dtype.as_numpy_dtype)
    else:
        array = np.array(leaves, dtype=dtype.as_numpy_dtype)
    return array.reshape(shape)

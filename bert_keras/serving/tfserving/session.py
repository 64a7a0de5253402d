"""TF Serving's predict path without the model server: the loader, the checks, the protos.

`SessionPredictor` loads an export the way TF Serving does (the TF1 SavedModel loader
into a session, ops resolved by SignatureDef tensor names) and answers `PredictRequest`
protos, replaying the warm-up file first. Tests and the demo use it where the model
server binary cannot be installed.
"""

from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tf.text ops, as TF Serving links them)
from google.protobuf import json_format
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from bert_keras.serving.layout import WARMUP_PATH, serving_signatures


class ServingError(RuntimeError):
    """A request TF Serving (or the stand-in) refused or could not answer.

    Server-side errors read "CODE: message" with CODE one of TF Serving's status codes
    (grpc.StatusCode names), as tensorflow::Status prints them.
    """

    @property
    def code(self):
        head, _, _ = str(self).partition(": ")
        return head if head in STATUS_CODES else "UNKNOWN"

    @property
    def message(self):
        """The text after the code: what TF Serving sends as REST `error` or gRPC details."""
        return str(self).removeprefix(f"{self.code}: ")


STATUS_CODES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)  # tensorflow::error::Code, numbered 0..16 in this order


def error(code, message):
    """A `ServingError` with TF Serving's status `code`."""
    return ServingError(f"{code}: {message}")


class SessionPredictor:
    """Serves one SavedModel version through `tf.compat.v1.saved_model.loader.load`."""

    def __init__(self, export_path, tags=("serve",), replay_warmup=True):
        self.export_path = Path(export_path)
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        # TF Serving's own loader path on purpose; its "load is deprecated" note is not for users.
        logger, level = tf.get_logger(), tf.get_logger().level
        logger.setLevel("ERROR")
        try:
            self.meta_graph = tf.compat.v1.saved_model.loader.load(self.session, list(tags), str(self.export_path))
        finally:
            logger.setLevel(level)
        self.signatures = serving_signatures(self.meta_graph)
        self.warmup_responses = self.replay_warmup() if replay_warmup else []

    def replay_warmup(self):
        return [self.predict(request) for request in warmup_requests(self.export_path)]

    def run(self, request, max_rows=None):
        """`PredictRequest` -> (signature name, {output name: ndarray}), validated as TF
        Serving validates it; for servers that answer in another format than protos (REST).

        `max_rows` runs a larger batch in slices of that many rows (memory bounded by the
        slice, not the request), put back together as one batch's outputs would be:
        per-token outputs zero-padded to the longest row."""
        name, signature, inputs, outputs = checked_request(self.signatures, request)
        fetch = {key: signature.outputs[key].name for key in outputs}
        rows = {value.shape[0] if value.ndim else None for value in inputs.values()}
        (count,) = rows if len(rows) == 1 else (None,)
        if max_rows is None or count is None or count <= max_rows:
            return name, self._run(fetch, {signature.inputs[key].name: value for key, value in inputs.items()})
        slices = [
            self._run(
                fetch, {signature.inputs[key].name: value[start : start + max_rows] for key, value in inputs.items()}
            )
            for start in range(0, count, max_rows)
        ]
        return name, {key: _concatenate_rows([part[key] for part in slices]) for key in fetch}

    def _run(self, fetch, feed):
        try:
            results = self.session.run(fetch, feed)
        except tf.errors.OpError as error:
            raise ServingError(f"{STATUS_CODES[error.error_code]}: {error.message}") from None
        # A rank-0 output comes back as a scalar: an array, as from a TensorProto.
        return {
            key: np.asarray(value, dtype=object if isinstance(value, bytes) else None) for key, value in results.items()
        }

    def predict(self, request):
        """`PredictRequest` -> `PredictResponse`, validated as TF Serving validates it."""
        name, results = self.run(request)
        response = predict_pb2.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        response.model_spec.signature_name = name
        for key, value in results.items():
            response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
        return response

    def predict_texts(self, signature_name="serving_default", **inputs):
        """Convenience: numpy/str inputs in, dict of numpy outputs out, via protos."""
        return decode_response(self.predict(make_request("local", signature_name, inputs)))

    def close(self):
        self.session.close()


def _concatenate_rows(parts):
    """Slices' outputs as one batch's: rows concatenated, shorter axes padded (zeros, b"")."""
    if parts[0].ndim == 0:
        return parts[0]
    shape = np.max([part.shape for part in parts], axis=0)
    padded = []
    for part in parts:
        widths = [(0, 0)] + [(0, int(size) - have) for size, have in zip(shape[1:], part.shape[1:])]
        fill = b"" if part.dtype == object else 0
        padded.append(np.pad(part, widths, constant_values=fill) if any(w for _, w in widths) else part)
    return np.concatenate(padded)


def checked_request(signatures, request):
    """TF Serving's checks of a `PredictRequest` against a model's signatures.

    Returns (signature name, SignatureDef, {input name: ndarray}, output names to fetch);
    raises `ServingError` with TF Serving's status code otherwise.
    """
    name = request.model_spec.signature_name or "serving_default"
    if name not in signatures:
        raise ServingError(f'FAILED_PRECONDITION: Serving signature key "{name}" not found.')
    signature = signatures[name]
    missing = sorted(set(signature.inputs) - set(request.inputs))
    extra = sorted(set(request.inputs) - set(signature.inputs))
    if missing or extra:
        raise ServingError(
            f"INVALID_ARGUMENT: signature {name} expects inputs {sorted(signature.inputs)}; "
            f"missing {missing}, unexpected {extra}"
        )
    inputs = {}
    for key, proto in request.inputs.items():
        info = signature.inputs[key]
        if proto.dtype != info.dtype:
            raise ServingError(
                f"INVALID_ARGUMENT: input {key} must be {tf.dtypes.as_dtype(info.dtype).name}, "
                f"got {tf.dtypes.as_dtype(proto.dtype).name}"
            )
        try:
            if any(dim.size < 0 for dim in proto.tensor_shape.dim):
                raise ValueError(proto.tensor_shape)
            value = tf.make_ndarray(proto)
        except (ValueError, TypeError, MemoryError):
            raise ServingError(f"INVALID_ARGUMENT: tensor parsing error: {key}") from None
        expected_rank = len(info.tensor_shape.dim)
        if not info.tensor_shape.unknown_rank and value.ndim != expected_rank:
            raise ServingError(f"INVALID_ARGUMENT: input {key} must have rank {expected_rank}, got shape {value.shape}")
        inputs[key] = value
    outputs = list(request.output_filter) or sorted(signature.outputs)
    unknown = sorted(set(outputs) - set(signature.outputs))
    if unknown:
        raise ServingError(f"INVALID_ARGUMENT: unknown output_filter {unknown}")
    return name, signature, inputs, outputs


def warmup_requests(export_path):
    """The `PredictRequest`s of an export's warm-up file, which TF Serving replays at load."""
    path = Path(export_path) / WARMUP_PATH
    if not path.exists():
        return []

    return [
        prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()
    ]


def make_request(model_name, signature_name, inputs):
    """A `PredictRequest` from a dict of names -> lists/arrays (str lists become tf.string)."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    for key, value in inputs.items():
        array = np.asarray(value)
        if array.dtype.kind == "U":
            array = np.char.encode(array, "utf-8")
        elif array.dtype == object:
            array = np.array(
                [v.encode("utf-8") if isinstance(v, str) else v for v in array.ravel()], dtype=object
            ).reshape(array.shape)
        request.inputs[key].CopyFrom(tf.make_tensor_proto(array))
    return request


def decode_response(response):
    return {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}


def proto_json(message):
    """A proto as TF Serving's REST API writes it: every field, int64 as strings, enums by name."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )

"""Talking to TensorFlow Serving: a gRPC/REST client, and a local stand-in for its predict path.

`ServingClient` sends raw strings to a running `tensorflow_model_server` over gRPC
(`PredictionServiceStub`) or REST (`/v1/models/NAME:predict`, row or columnar JSON),
with timeouts, retries on UNAVAILABLE and errors that say what went wrong.

`SessionPredictor` loads an export the way TF Serving does (the TF1 SavedModel loader
into a session, ops resolved by SignatureDef tensor names) and answers `PredictRequest`
protos, replaying the warm-up file first. Tests and the demo use it where the model
server binary cannot be installed.
"""

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import tensorflow as tf

WARMUP_PATH = Path("assets.extra") / "tf_serving_warmup_requests"


class ServingError(RuntimeError):
    """A request TF Serving (or the stand-in) refused or could not answer."""


class SessionPredictor:
    """Serves one SavedModel version through `tf.compat.v1.saved_model.loader.load`."""

    def __init__(self, export_path, tags=("serve",), replay_warmup=True):
        import tensorflow_text  # noqa: F401  (registers the tf.text ops, as TF Serving links them)

        self.export_path = Path(export_path)
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        meta_graph = tf.compat.v1.saved_model.loader.load(
            self.session, list(tags), str(self.export_path)
        )
        self.signatures = {
            name: signature
            for name, signature in meta_graph.signature_def.items()
            if not name.startswith("__")
        }
        self.warmup_responses = self.replay_warmup() if replay_warmup else []

    def replay_warmup(self):
        path = self.export_path / WARMUP_PATH
        if not path.exists():
            return []
        from tensorflow_serving.apis import prediction_log_pb2

        responses = []
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            log = prediction_log_pb2.PredictionLog.FromString(record)
            responses.append(self.predict(log.predict_log.request))
        return responses

    def predict(self, request):
        """`PredictRequest` -> `PredictResponse`, validated as TF Serving validates it."""
        from tensorflow_serving.apis import predict_pb2

        name = request.model_spec.signature_name or "serving_default"
        if name not in self.signatures:
            raise ServingError(
                f"INVALID_ARGUMENT: Serving signature name: \"{name}\" not found in signature def; "
                f"available: {sorted(self.signatures)}"
            )
        signature = self.signatures[name]
        missing = sorted(set(signature.inputs) - set(request.inputs))
        extra = sorted(set(request.inputs) - set(signature.inputs))
        if missing or extra:
            raise ServingError(
                f"INVALID_ARGUMENT: signature {name} expects inputs {sorted(signature.inputs)}; "
                f"missing {missing}, unexpected {extra}"
            )
        feed = {}
        for key, proto in request.inputs.items():
            info = signature.inputs[key]
            if proto.dtype != info.dtype:
                raise ServingError(
                    f"INVALID_ARGUMENT: input {key} must be {tf.dtypes.as_dtype(info.dtype).name}, "
                    f"got {tf.dtypes.as_dtype(proto.dtype).name}"
                )
            value = tf.make_ndarray(proto)
            expected_rank = len(info.tensor_shape.dim)
            if not info.tensor_shape.unknown_rank and value.ndim != expected_rank:
                raise ServingError(
                    f"INVALID_ARGUMENT: input {key} must have rank {expected_rank}, got shape {value.shape}"
                )
            feed[info.name] = value
        outputs = list(request.output_filter) or sorted(signature.outputs)
        unknown = sorted(set(outputs) - set(signature.outputs))
        if unknown:
            raise ServingError(f"INVALID_ARGUMENT: unknown output_filter {unknown}")
        try:
            results = self.session.run({key: signature.outputs[key].name for key in outputs}, feed)
        except tf.errors.InvalidArgumentError as error:
            raise ServingError(f"INVALID_ARGUMENT: {error.message}") from None
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


def make_request(model_name, signature_name, inputs, version=None):
    """A `PredictRequest` from a dict of names -> lists/arrays (str lists become tf.string)."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = int(version)
    for key, value in inputs.items():
        array = np.asarray(value)
        if array.dtype.kind == "U":
            array = np.char.encode(array, "utf-8")
        elif array.dtype == object:
            array = np.array([v.encode("utf-8") if isinstance(v, str) else v for v in array.ravel()],
                             dtype=object).reshape(array.shape)
        request.inputs[key].CopyFrom(tf.make_tensor_proto(array))
    return request


def decode_response(response):
    return {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}


class ServingClient:
    """Client of one model on a `tensorflow_model_server`.

    `ServingClient("localhost", model="bert").predict(text=["..."])` uses gRPC (port
    8500); `predict_rest` the REST API (port 8501) in row ("instances") or columnar
    ("inputs") format. Calls retry on UNAVAILABLE with exponential back-off.
    """

    def __init__(self, host="localhost", model="bert", grpc_port=8500, rest_port=8501,
                 timeout=10.0, retries=3, backoff=0.5, version=None):
        self.host, self.model, self.version = host, model, version
        self.grpc_port, self.rest_port = grpc_port, rest_port
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self._stub = None

    def _grpc_stub(self):
        if self._stub is None:
            import grpc
            from tensorflow_serving.apis import prediction_service_pb2_grpc

            channel = grpc.insecure_channel(f"{self.host}:{self.grpc_port}")
            self._stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return self._stub

    def predict(self, signature="serving_default", **inputs):
        """gRPC Predict: named inputs (lists of str for text) -> dict of numpy outputs."""
        import grpc

        request = make_request(self.model, signature, inputs, self.version)
        for attempt in range(self.retries + 1):
            try:
                return decode_response(self._grpc_stub().Predict(request, timeout=self.timeout))
            except grpc.RpcError as error:
                code = error.code()
                if code == grpc.StatusCode.UNAVAILABLE and attempt < self.retries:
                    time.sleep(self.backoff * 2**attempt)
                    continue
                raise ServingError(
                    f"gRPC Predict to {self.host}:{self.grpc_port} model {self.model!r} failed: "
                    f"{code.name}: {error.details()}"
                ) from None

    def predict_rest(self, signature="serving_default", format="row", **inputs):
        """REST predict in row (`instances`) or columnar (`inputs`) format."""
        if format == "row":
            names = list(inputs)
            rows = zip(*(inputs[name] for name in names))
            body = {"signature_name": signature,
                    "instances": [dict(zip(names, row)) for row in rows]}
            key = "predictions"
        elif format == "columnar":
            body = {"signature_name": signature, "inputs": {k: list(v) for k, v in inputs.items()}}
            key = "outputs"
        else:
            raise ValueError(f"format must be 'row' or 'columnar', got {format!r}")
        version = f"/versions/{self.version}" if self.version is not None else ""
        url = f"http://{self.host}:{self.rest_port}/v1/models/{self.model}{version}:predict"
        data = json.dumps(body).encode("utf-8")
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                    return json.loads(reply.read())[key]
            except urllib.error.HTTPError as error:
                detail = error.read().decode("utf-8", "replace")
                if error.code == 503 and attempt < self.retries:
                    time.sleep(self.backoff * 2**attempt)
                    continue
                raise ServingError(f"REST predict {url} failed: HTTP {error.code}: {detail}") from None
            except urllib.error.URLError as error:
                if attempt < self.retries:
                    time.sleep(self.backoff * 2**attempt)
                    continue
                raise ServingError(f"REST predict {url} unreachable: {error.reason}") from None

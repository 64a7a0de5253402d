"""A client of TensorFlow Serving's gRPC and REST APIs (or of `bert-keras serve`).

`ServingClient` sends raw strings to a running `tensorflow_model_server` over gRPC
(`PredictionServiceStub`) or REST (`/v1/models/NAME:predict`, row or columnar JSON),
with timeouts, retries on UNAVAILABLE and errors that say what went wrong.
"""

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2

from bert_keras.serving.tfserving.session import ServingError, decode_response, make_request, proto_json


class ServingClient:
    """Client of one model on a `tensorflow_model_server`.

    `ServingClient("localhost", model="bert").predict(text=["..."])` uses gRPC (port
    8500); `predict_rest` the REST API (port 8501) in row ("instances") or columnar
    ("inputs") format, sending bytes as `{"b64": ...}`. `metadata`/`status` (and their
    `_rest` twins) return the signatures and the version states as TF Serving's REST API
    writes them, whichever protocol asked. `version` or `version_label` picks a version.
    Calls retry on UNAVAILABLE with exponential back-off.
    """

    def __init__(
        self,
        host="localhost",
        model="bert",
        grpc_port=8500,
        rest_port=8501,
        timeout=10.0,
        retries=3,
        backoff=0.5,
        version=None,
        version_label=None,
    ):
        if version is not None and version_label is not None:
            raise ValueError("give a version or a version_label, not both")
        self.host, self.model, self.version, self.version_label = host, model, version, version_label
        self.grpc_port, self.rest_port = grpc_port, rest_port
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self._channel = None

    def _model_spec(self, spec):
        spec.name = self.model
        if self.version is not None:
            spec.version.value = int(self.version)
        if self.version_label is not None:
            spec.version_label = self.version_label
        return spec

    def _grpc(self, method, request):
        """`method` of PredictionService (or ModelService for GetModelStatus), with retries."""
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(f"{self.host}:{self.grpc_port}")
        stub = (
            model_service_pb2_grpc.ModelServiceStub
            if method == "GetModelStatus"
            else prediction_service_pb2_grpc.PredictionServiceStub
        )(self._channel)
        try:
            return self._retrying(
                lambda: getattr(stub, method)(request, timeout=self.timeout),
                lambda error: isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE,
            )
        except grpc.RpcError as error:
            raise ServingError(
                f"gRPC {method} to {self.host}:{self.grpc_port} model {self.model!r} failed: "
                f"{error.code().name}: {error.details()}"
            ) from None

    def _rest(self, suffix="", body=None):
        """GET (no body) or POST a JSON body to the model's REST path + `suffix`; the JSON reply."""
        version = (
            f"/versions/{self.version}"
            if self.version is not None
            else f"/labels/{urllib.parse.quote(self.version_label, safe='')}"
            if self.version_label is not None
            else ""
        )
        model = urllib.parse.quote(self.model, safe="")
        url = f"http://{self.host}:{self.rest_port}/v1/models/{model}{version}{suffix}"
        data = None if body is None else json.dumps(body).encode("utf-8")

        def send():
            request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return json.loads(reply.read().decode("utf-8", "surrogateescape"))

        def retryable(error):  # 503 from the server, or no server answering
            if isinstance(error, urllib.error.HTTPError):
                return error.code == 503
            return isinstance(error, urllib.error.URLError)

        try:
            return self._retrying(send, retryable)
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")
            raise ServingError(f"REST {url} failed: HTTP {error.code}: {detail}") from None
        except urllib.error.URLError as error:
            raise ServingError(f"REST {url} unreachable: {error.reason}") from None

    def _retrying(self, call, retryable):
        """`call()`, called again after exponential back-off while it raises a `retryable`
        error and retries are left."""
        for attempt in range(self.retries):
            try:
                return call()
            except Exception as error:
                if not retryable(error):
                    raise
            time.sleep(self.backoff * 2**attempt)
        return call()

    def predict(self, signature="serving_default", **inputs):
        """gRPC Predict: named inputs (lists of str for text) -> dict of numpy outputs."""
        request = make_request(self.model, signature, inputs)
        self._model_spec(request.model_spec)
        return decode_response(self._grpc("Predict", request))

    def predict_rest(self, signature="serving_default", format="row", **inputs):
        """REST predict in row (`instances`) or columnar (`inputs`) format."""
        if format == "row":
            names = list(inputs)
            rows = zip(*(inputs[name] for name in names))
            body = {
                "signature_name": signature,
                "instances": [{name: rest_json(value) for name, value in zip(names, row)} for row in rows],
            }
            key = "predictions"
        elif format == "columnar":
            body = {"signature_name": signature, "inputs": {k: rest_json(v) for k, v in inputs.items()}}
            key = "outputs"
        else:
            raise ValueError(f"format must be 'row' or 'columnar', got {format!r}")
        return from_rest_json(self._rest(":predict", body)[key])

    def metadata(self):
        """gRPC GetModelMetadata: {signature name: SignatureDef as JSON}."""
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._model_spec(request.model_spec)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        self._grpc("GetModelMetadata", request).metadata["signature_def"].Unpack(signatures)
        return proto_json(signatures)["signature_def"]

    def metadata_rest(self):
        """REST `GET .../metadata`: {signature name: SignatureDef as JSON}."""
        return self._rest("/metadata")["metadata"]["signature_def"]["signature_def"]

    def status(self):
        """ModelService.GetModelStatus: the `model_version_status` list."""
        request = get_model_status_pb2.GetModelStatusRequest()
        self._model_spec(request.model_spec)
        return proto_json(self._grpc("GetModelStatus", request))["model_version_status"]

    def status_rest(self):
        """REST `GET /v1/models/NAME[/versions/N]`: the `model_version_status` list."""
        return self._rest()["model_version_status"]


def rest_json(value):
    """An input value as TF Serving's REST API takes it: bytes as `{"b64": ...}`, arrays as lists."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [rest_json(item) for item in value]
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_rest_json(value):
    """A REST reply with `{"b64": ...}` values (outputs named `*_bytes`) decoded to bytes."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("b64"), str):
            return base64.b64decode(value["b64"])
        return {key: from_rest_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_rest_json(item) for item in value]
    return value

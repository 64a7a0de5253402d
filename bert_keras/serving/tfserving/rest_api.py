"""TF Serving's REST API on the proto APIs: paths, JSON requests and replies, HTTP status codes.

As tensorflow_serving/model_servers/http_rest_api_handler.cc and http_rest_api_util.cc answer
them: `POST /v1/models/NAME[/versions/N|/labels/L]:predict` (row `instances` / columnar
`inputs`, see `json_tensor`), `GET /v1/models/NAME[/versions/N|/labels/L][/metadata]`.
"""

import json
import re
import urllib.parse

from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, model_pb2, predict_pb2

from bert_keras.serving.tfserving import json_tensor
from bert_keras.serving.tfserving.json_reply import json_from_tensors
from bert_keras.serving.tfserving.session import STATUS_CODES, ServingError, error, proto_json

# ToHTTPStatusCode in tensorflow_serving/model_servers/http_server.cc, in STATUS_CODES order.
HTTP_STATUS = dict(
    zip(STATUS_CODES, (200, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500, 401))
)
# http_rest_api_util.cc: the REST paths (RE2 \d is ASCII, hence re.ASCII).
_REST_PATH = re.compile(r"/v1/.*", re.IGNORECASE | re.ASCII)
_PREDICTION_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE | re.ASCII,
)
_STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?", re.IGNORECASE | re.ASCII
)


class RestApi:
    """The REST API of a server with the proto APIs (`resolve`, `run`, `metadata`, `status`,
    `classify_or_regress`), as `LocalModelServer` has them."""

    def rest(self, method, path, body):
        """One REST request -> (HTTP status, JSON reply bytes); never raises."""
        path = path.split("?", 1)[0].split("#", 1)[0]  # evhttp's uri_path
        shown = path.encode("latin-1", "replace").decode("utf-8", "surrogateescape")
        if not _REST_PATH.fullmatch(path):
            return 404, json_tensor.encode(json.dumps({"error": f"Not found: {shown}"}, ensure_ascii=False))
        try:
            return 200, json_tensor.encode(self._rest_reply(method, path, shown, body))
        except RecursionError:
            status = error("INVALID_ARGUMENT", "JSON Value nested too deeply")
        except ServingError as caught:
            status = caught
        except Exception as caught:  # a bug here must still answer, as TF Serving's INTERNAL would
            status = error("INTERNAL", f"{type(caught).__name__}: {caught}")
        return HTTP_STATUS[status.code], json_tensor.encode(json.dumps({"error": status.message}, ensure_ascii=False))

    def _rest_reply(self, method, path, shown, body):
        match = _PREDICTION_PATH if method == "POST" else _STATUS_PATH if method == "GET" else None
        match = match and match.fullmatch(path)
        if not match:
            raise error("INVALID_ARGUMENT", f"Malformed request: {method} {shown}")
        name, version, label, action = match.groups()
        spec = model_pb2.ModelSpec(name="" if name is None else _unquote(name))
        if version is not None:
            if int(version) >= 2**63:
                raise error("INVALID_ARGUMENT", f"Failed to convert version: {version} to numeric.")
            spec.version.value = int(version)
        if label is not None:
            spec.version_label = _unquote(label)
        if method == "POST":
            if action == "predict":
                return self._rest_predict(spec, body)
            if action in ("classify", "regress"):
                request = predict_pb2.PredictRequest(model_spec=spec)
                request.model_spec.signature_name = json_tensor.signature_name(json_tensor.parse_json(body))
                self.classify_or_regress(request, action)
        elif not spec.name:
            raise error("INVALID_ARGUMENT", "Missing model name in request.")
        elif action == "metadata":
            response = self.metadata(
                get_model_metadata_pb2.GetModelMetadataRequest(model_spec=spec, metadata_field=["signature_def"])
            )
            signatures = get_model_metadata_pb2.SignatureDefMap()
            response.metadata["signature_def"].Unpack(signatures)
            return json.dumps(
                {"model_spec": proto_json(response.model_spec), "metadata": {"signature_def": proto_json(signatures)}},
                indent=1,
            )
        else:  # any other subresource spelling, e.g. METADATA, asks for the status, as in TF Serving
            return json.dumps(
                proto_json(self.status(get_model_status_pb2.GetModelStatusRequest(model_spec=spec))), indent=1
            )
        raise error("INVALID_ARGUMENT", f"Malformed request: {method} {shown}")

    def _rest_predict(self, spec, body):
        request = predict_pb2.PredictRequest(model_spec=spec)
        doc = json_tensor.parse_json(body)
        resolved = None  # (model, version), once the signature is looked up

        def signature_inputs(name):
            nonlocal resolved
            resolved = model, version = self.resolve(request.model_spec)
            name = name or "serving_default"
            signature = model.versions[version].meta_graph.signature_def.get(name)
            if signature is None:
                raise error("INVALID_ARGUMENT", f'Serving signature name: "{name}" not found in signature def')
            return signature.inputs

        format = json_tensor.fill_predict_request(doc, signature_inputs, request)
        *_, outputs = self.run(request, resolved)
        return json_from_tensors(outputs, format)


def _unquote(text):
    """Percent-decoded path segment (curl_easy_unescape) as a proto string."""
    raw = urllib.parse.unquote_to_bytes(text.encode("latin-1", "replace"))
    return json_tensor.proto_text(raw.decode("utf-8", "surrogateescape"))

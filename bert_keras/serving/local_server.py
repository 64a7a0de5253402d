"""A stand-in for `tensorflow_model_server` where it cannot run (no Docker, no binary).

It serves the newest version under a model base directory with TF Serving's two APIs:
gRPC `PredictionService.Predict` and REST `POST /v1/models/NAME[/versions/N]:predict`
(row `instances` / columnar `inputs`) plus `GET /v1/models/NAME` status. Requests run
through `SessionPredictor`, the TF1 session loader path TF Serving itself uses, so a
client that works here speaks the real server's protocol. It is a development tool:
one model, no batching, no version policy.
"""

import json
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from bert_keras.serving import ServingError, SessionPredictor, decode_response, make_request


def newest_version(model_base):
    versions = [p for p in Path(model_base).iterdir() if p.is_dir() and p.name.isdigit()]
    if not versions:
        raise FileNotFoundError(f"no numbered version directories under {model_base}")
    return max(versions, key=lambda p: int(p.name))


def _jsonable(value):
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return [_jsonable(v) for v in value] if value.ndim else _jsonable(value.item())
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):  # a row's scalar, e.g. label_ids[i]
        return value.item()
    return value


class LocalModelServer:
    """`LocalModelServer(base, name).start()` serves until `stop()`; ports 0 pick free ones."""

    def __init__(self, model_base, name="bert", host="127.0.0.1", grpc_port=8500, rest_port=8501):
        self.name = name
        self.version_path = newest_version(model_base)
        self.version = int(self.version_path.name)
        self.predictor = SessionPredictor(self.version_path)
        self.lock = threading.Lock()  # one session.run at a time, like a single batch thread
        self.host, self.grpc_port, self.rest_port = host, grpc_port, rest_port
        self._grpc = self._http = None

    def predict(self, request):
        if request.model_spec.name != self.name:
            raise ServingError(f"NOT_FOUND: Servable not found for request: Latest({request.model_spec.name})")
        if request.model_spec.HasField("version") and request.model_spec.version.value != self.version:
            raise ServingError(f"NOT_FOUND: Servable not found for request: "
                               f"Specific({self.name}, {request.model_spec.version.value})")
        with self.lock:
            response = self.predictor.predict(request)
        response.model_spec.version.value = self.version
        return response

    def start(self):
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        server = self

        class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
            def Predict(self, request, context):
                try:
                    return server.predict(request)
                except ServingError as error:
                    code = grpc.StatusCode.NOT_FOUND if str(error).startswith("NOT_FOUND") \
                        else grpc.StatusCode.INVALID_ARGUMENT
                    context.abort(code, str(error))

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port(f"{self.host}:{self.grpc_port}")
        self._grpc.start()
        self._http = ThreadingHTTPServer((self.host, self.rest_port), self._rest_handler())
        self.rest_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self._grpc is not None:
            self._grpc.stop(None)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self.predictor.close()

    def rest_predict(self, path, body):
        """The REST predict API: (status, JSON-able reply)."""
        prefix = f"/v1/models/{self.name}"
        if not path.startswith(prefix) or not path.endswith(":predict"):
            return 404, {"error": f"Servable not found for request path {path}"}
        version = path[len(prefix):-len(":predict")]
        try:
            body = json.loads(body)
        except json.JSONDecodeError as error:
            return 400, {"error": f"JSON Parse error: {error}"}
        signature = body.get("signature_name", "serving_default")
        if ("instances" in body) == ("inputs" in body):
            return 400, {"error": "JSON Value must have exactly one of 'instances' (row format) "
                                  "or 'inputs' (columnar format)"}
        if "instances" in body:
            rows = body["instances"]
            if not isinstance(rows, list) or not rows:
                return 400, {"error": "'instances' must be a non-empty list"}
            if all(isinstance(row, dict) for row in rows):
                names = sorted(rows[0])
                inputs = {name: [row.get(name) for row in rows] for name in names}
            else:
                inputs = {"text": rows}
        else:
            inputs = body["inputs"] if isinstance(body["inputs"], dict) else {"text": body["inputs"]}
        request = make_request(self.name, signature, inputs)
        if version.startswith("/versions/"):
            request.model_spec.version.value = int(version[len("/versions/"):])
        try:
            outputs = decode_response(self.predict(request))
        except (ServingError, ValueError, TypeError) as error:
            return (404 if str(error).startswith("NOT_FOUND") else 400), {"error": str(error)}
        if "instances" in body:
            count = len(body["instances"])
            return 200, {"predictions": [{k: _jsonable(v[i]) for k, v in outputs.items()} for i in range(count)]}
        return 200, {"outputs": {k: _jsonable(v) for k, v in outputs.items()}}

    def _rest_handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status, payload):
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") == f"/v1/models/{server.name}":
                    status = {"version": str(server.version), "state": "AVAILABLE",
                              "status": {"error_code": "OK", "error_message": ""}}
                    self._reply(200, {"model_version_status": [status]})
                else:
                    self._reply(404, {"error": f"Could not find any versions of model at {self.path}"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._reply(*server.rest_predict(self.path, body))

            def log_message(self, *args):
                pass

        return Handler

"""A stand-in for `tensorflow_model_server` where it cannot run (no Docker, no binary).

It serves TF Serving's APIs as TF Serving 2.x answers them: gRPC `PredictionService`
(Predict, GetModelMetadata; Classify/Regress answer as for a predict signature) and
`ModelService.GetModelStatus`; REST `POST /v1/models/NAME[/versions/N|/labels/L]:predict`
(row `instances` / columnar `inputs`, converted by the signature's dtypes, see
`json_tensor`), `GET /v1/models/NAME[/versions/N|/labels/L][/metadata]`. Models come
from a base directory (newest version) or a `--model_config_file` ModelServerConfig
(version policy, labels). Status codes, HTTP codes and error texts follow TF Serving's
sources (tensorflow_serving/model_servers/http_rest_api_handler.cc, http_server.cc,
get_model_status_impl.cc, servables/tensorflow/get_model_metadata_impl.cc, predict_util.cc);
every malformed request gets a JSON `{"error": ...}` reply (`rest_api`, `rest_http`). Requests run through
`SessionPredictor`, the TF1 session loader path TF Serving itself uses. It is a
development tool: no batching, no polling for new versions, no config reload.

Under load it holds connections as TF Serving does rather than resetting them: a listen
backlog of `LISTEN_BACKLOG`, up to `max_connections` served at once (more wait in the
backlog), one model run at a time, a request larger than `max_request_bytes` refused
before its body is read (HTTP 413, gRPC RESOURCE_EXHAUSTED), a request whose bytes stop
coming dropped after `request_timeout` seconds, and batches of more than `max_batch_rows`
rows run in slices of that many, so a request's memory is bounded.
"""

import threading
from concurrent import futures
from pathlib import Path

import grpc
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

from bert_keras.serving.tfserving.rest_api import RestApi
from bert_keras.serving.tfserving.rest_http import RestServer
from bert_keras.serving.tfserving.session import ServingError, SessionPredictor, error

# The default of --max-request-bytes: 16 MiB, some 100,000 sentences of JSON (gRPC's own
# default is 4 MiB; TF Serving raises both to 2 GiB, which lets one client take the memory).
MAX_REQUEST_BYTES = 16 << 20


def model_server_config(model_base=None, name="bert", config_file=None):
    """The ModelServerConfig to serve: `config_file` (text format) or one model at `model_base`."""
    config = model_server_config_pb2.ModelServerConfig()
    if config_file is not None:
        text_format.Parse(Path(config_file).read_text(), config)
        if not config.HasField("model_config_list"):
            raise ValueError(f"{config_file}: only model_config_list is supported")
    else:
        model = config.model_config_list.config.add(name=name, base_path=str(model_base))
        model.model_platform = "tensorflow"
    return config


def versions_to_load(model_config):
    """Version numbers under `base_path` that the model's version policy serves (default: the latest)."""
    base = Path(model_config.base_path)
    found = sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit()) if base.is_dir() else []
    policy = model_config.model_version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        versions = found
    elif choice == "specific":
        versions = [v for v in found if v in set(policy.specific.versions)]
    else:
        versions = found[-(policy.latest.num_versions or 1) :]
    if not versions:
        raise FileNotFoundError(
            f"model {model_config.name!r}: no version directories under {base} "
            f"match its version policy ({choice or 'latest'})"
        )
    return versions


class ServedModel:
    """One model's loaded versions and its version labels."""

    def __init__(self, model_config):
        if model_config.model_platform not in ("", "tensorflow"):
            raise ValueError(
                f"model {model_config.name!r}: platform {model_config.model_platform!r} "
                "is not served (only 'tensorflow')"
            )
        self.name = model_config.name
        base = Path(model_config.base_path)
        self.versions = {v: SessionPredictor(base / str(v)) for v in versions_to_load(model_config)}
        self.labels = dict(model_config.version_labels)
        for version in self.labels.values():
            if version not in self.versions:
                self.close()
                raise ValueError(
                    f"FAILED_PRECONDITION: Request to assign label to version {version} of model "
                    f"{self.name}, which is not currently available for inference"
                )

    def close(self):
        for predictor in self.versions.values():
            predictor.close()


class LocalModelServer(RestApi):
    """`LocalModelServer(base, name).start()` serves until `stop()`; ports 0 pick free ones.

    `model_config_file` (a ModelServerConfig in text format, as tensorflow_model_server's
    --model_config_file) serves several models, versions and labels instead of `model_base`.
    """

    def __init__(
        self,
        model_base=None,
        name="bert",
        host="127.0.0.1",
        grpc_port=8500,
        rest_port=8501,
        model_config_file=None,
        max_request_bytes=MAX_REQUEST_BYTES,
        max_batch_rows=256,
        max_connections=512,
        request_timeout=30.0,
    ):
        self.max_request_bytes, self.max_batch_rows = int(max_request_bytes), int(max_batch_rows)
        self.max_connections, self.request_timeout = int(max_connections), float(request_timeout)
        config = model_server_config(model_base, name, model_config_file)
        self.models = {}
        try:
            for model_config in config.model_config_list.config:
                self.models[model_config.name] = ServedModel(model_config)
        except Exception:
            self.close_models()
            raise
        self.lock = threading.Lock()  # one session.run at a time, like a single batch thread
        self.host, self.grpc_port, self.rest_port = host, grpc_port, rest_port
        self._grpc = self._http = None

    def close_models(self):
        for model in self.models.values():
            model.close()

    # --- the APIs on protos, as ServerCore and the *_impl.cc files answer them ---

    def resolve(self, model_spec):
        """ModelSpec -> (ServedModel, version), as ServerCore::GetServableHandle resolves it."""
        model = self.models.get(model_spec.name)
        choice = model_spec.WhichOneof("version_choice")
        if choice == "version_label":
            if model is None or model_spec.version_label not in model.labels:
                raise error("INVALID_ARGUMENT", f"Unrecognized servable version label: {model_spec.version_label}")
            version = model.labels[model_spec.version_label]
        elif choice == "version":
            version = model_spec.version.value
        else:
            version = max(model.versions) if model else None
        if model is None or version not in model.versions:
            wanted = f"Latest({model_spec.name})" if choice is None else f"Specific({model_spec.name}, {version})"
            raise error("NOT_FOUND", f"Servable not found for request: {wanted}")
        return model, version

    def run(self, request, resolved=None):
        """(model, version, signature name, {output: ndarray}) of a PredictRequest;
        `resolved` is its (model, version) when the caller has resolved it already."""
        model, version = resolved or self.resolve(request.model_spec)
        with self.lock:
            signature, outputs = model.versions[version].run(request, max_rows=self.max_batch_rows)
        return model, version, signature, outputs

    def predict(self, request):
        model, version, signature, outputs = self.run(request)
        response = predict_pb2.PredictResponse()
        response.model_spec.name, response.model_spec.signature_name = model.name, signature
        response.model_spec.version.value = version
        for key, value in outputs.items():
            response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
        return response

    def metadata(self, request):
        """GetModelMetadataRequest -> GetModelMetadataResponse (signature_def only, as TF Serving)."""
        if not request.HasField("model_spec"):
            raise error("INVALID_ARGUMENT", "Missing ModelSpec")
        if not request.metadata_field:
            raise error("INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != "signature_def":
                raise error("INVALID_ARGUMENT", f"Metadata field {field} is not supported")
        model, version = self.resolve(request.model_spec)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        for name, signature in model.versions[version].meta_graph.signature_def.items():
            signatures.signature_def[name].CopyFrom(signature)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = model.name
        response.model_spec.version.value = version
        response.metadata["signature_def"].Pack(signatures)
        return response

    def status(self, request):
        """GetModelStatusRequest -> GetModelStatusResponse; a version label is not resolved, as in TF Serving."""
        if not request.HasField("model_spec"):
            raise error("INVALID_ARGUMENT", "Missing ModelSpec")
        name = request.model_spec.name
        model = self.models.get(name)
        if request.model_spec.HasField("version"):
            version = request.model_spec.version.value
            if model is None or version not in model.versions:
                raise error("NOT_FOUND", f"Could not find version {version} of model {name}")
            versions = [version]
        else:
            if model is None:
                raise error("NOT_FOUND", f"Could not find any versions of model {name}")
            versions = sorted(model.versions, reverse=True)  # ServableStateMonitor::VersionMap: newest first
        response = get_model_status_pb2.GetModelStatusResponse()
        for version in versions:
            response.model_version_status.add(version=version, state=get_model_status_pb2.ModelVersionStatus.AVAILABLE)
            response.model_version_status[-1].status.SetInParent()  # error_code OK, always set by TF Serving
        return response

    def classify_or_regress(self, request, method):
        """Classify/Regress need a tf.Example signature of that method; exports have predict signatures."""
        model, version = self.resolve(request.model_spec)
        name = request.model_spec.signature_name or "serving_default"
        signature = model.versions[version].meta_graph.signature_def.get(name)
        if signature is None:
            raise error("INVALID_ARGUMENT", f"No signature was found with the name: {name}")
        kind = {"classify": "classification", "regress": "regression"}[method]
        raise error(
            "INVALID_ARGUMENT",
            f"Expected {kind} signature method_name to be tensorflow/serving/{method}. Was: {signature.method_name}",
        )

    # --- serving ---

    def start(self):
        server = self

        def answer(function):
            """A gRPC method from a proto -> proto function: ServingErrors keep their code."""

            def method(self, request, context):
                try:
                    return function(request)
                except ServingError as caught:
                    context.abort(grpc.StatusCode[caught.code], caught.message)
                except Exception as caught:  # answer INTERNAL rather than drop the call
                    context.abort(grpc.StatusCode.INTERNAL, f"{type(caught).__name__}: {caught}")

            return method

        class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
            Predict = answer(server.predict)
            GetModelMetadata = answer(server.metadata)
            Classify = answer(lambda request: server.classify_or_regress(request, "classify"))
            Regress = answer(lambda request: server.classify_or_regress(request, "regress"))

        class ModelService(model_service_pb2_grpc.ModelServiceServicer):
            GetModelStatus = answer(server.status)

        # Calls beyond the workers wait in gRPC's queue; larger messages get RESOURCE_EXHAUSTED.
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[("grpc.max_receive_message_length", self.max_request_bytes), ("grpc.max_send_message_length", -1)],
        )
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(), self._grpc)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port(f"{self.host}:{self.grpc_port}")
        self._grpc.start()
        self._http = RestServer((self.host, self.rest_port), self, self.max_connections)
        self.rest_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self._grpc is not None:
            self._grpc.stop(None)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self.close_models()

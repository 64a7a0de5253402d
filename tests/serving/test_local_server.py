"""`bert-keras serve` against TF Serving's own test cases, through real clients.

Vectors come from tensorflow/serving:
- tensorflow_serving/util/json_tensor_test.cc (JSON <-> tensor conversion), run on
  `json_tensor` with the same signature input maps;
- tensorflow_serving/model_servers/http_rest_api_handler_test.cc (REST routing, status
  codes, predict/status/metadata replies), run over HTTP on a tiny classifier export;
- tensorflow_serving/servables/tensorflow/testdata/saved_model_half_plus_two_2_versions_metadata.json
  (the REST metadata layout);
- get_model_status_impl.cc / get_model_metadata_impl.cc / predict_util.cc (gRPC codes),
  through `grpc` and the `tensorflow_serving.apis` stubs.
A hypothesis test throws random and malformed requests at the server.
"""

import base64
import http.client
import json
import socket

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from harness import SERVING_VOCAB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.serving import export
from bert_keras.serving.client import ServingClient
from bert_keras.serving.tfserving import json_tensor
from bert_keras.serving.tfserving.json_reply import json_from_tensors
from bert_keras.serving.tfserving.session import ServingError, SessionPredictor, decode_response, make_request

LABELS = ["neg", "neutral", "pos"]
SERVE_IDS_ROW = {"input_word_ids": [2, 5, 6, 3], "input_mask": [1, 1, 1, 1], "input_type_ids": [0, 0, 0, 0]}


# --- json_tensor_test.cc -------------------------------------------------------------


def infomap(**dtypes):
    from tensorflow.core.protobuf import meta_graph_pb2

    return {
        name: meta_graph_pb2.TensorInfo(dtype=tf.dtypes.as_dtype(dtype).as_datatype_enum)
        for name, dtype in dtypes.items()
    }


def fill(body, infos):
    """FillPredictRequestFromJson: (request, format, {name: ndarray})."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    body = body.encode("utf-8") if isinstance(body, str) else body
    format = json_tensor.fill_predict_request(json_tensor.parse_json(body), lambda name: infos, request)
    return request, format, {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}


HELLO_WORLD = '[{ "b64" : "aGVsbG8=" }, { "b64": "d29ybGQ=" }]'
FILL_CASES = {  # test name: (infomap, body, format, {name: expected array})
    "SingleUnnamedTensor": (
        infomap(default=tf.int32),
        '{"instances": [[1,2],[3,4],[5,6]]}',
        "row",
        {"default": np.array([[1, 2], [3, 4], [5, 6]], np.int32)},
    ),
    "MixedInputForFloatTensor": (
        infomap(default=tf.float32),
        '{"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}',
        "row",
        {"default": np.array([1, 2, 3, 4, 5.003, 0.007, 0], np.float32)},
    ),
    "MixedInputForDoubleTensor": (
        infomap(default=tf.float64),
        '{"instances": [1.0, 2, 3, 4, 0.662, 0, 0.0]}',
        "row",
        {"default": np.array([1, 2, 3, 4, 0.662, 0, 0], np.float64)},
    ),
    "SingleUnnamedTensorWithSignature": (
        infomap(default=tf.int32),
        '{"signature_name": "predict_images", "instances": [[1,2]]}',
        "row",
        {"default": np.array([[1, 2]], np.int32)},
    ),
    "SingleUnnamedTensorBase64Scalars": (
        infomap(default=tf.string),
        f'{{"instances": {HELLO_WORLD}}}',
        "row",
        {"default": np.array([b"hello", b"world"], object)},
    ),
    "SingleUnnamedTensorBase64Lists": (
        infomap(default=tf.string),
        '{"instances": [[{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }]]}',
        "row",
        {"default": np.array([[b"hello"], [b"world"]], object)},
    ),
    "SingleNamedTensorBase64": (
        infomap(default=tf.string),
        '{"instances": [{"default": [[{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }]]}]}',
        "row",
        {"default": np.array([[[b"hello"], [b"world"]]], object)},
    ),
    "MultipleNamedTensor": (
        infomap(int_tensor=tf.int32, str_tensor=tf.string, float_tensor=tf.float32, dbl_tensor=tf.float64),
        """{"instances": [
            {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"], "float_tensor": [1.0, NaN],
             "dbl_tensor": [NaN]},
            {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"], "float_tensor": [2.0, Infinity],
             "dbl_tensor": [2.0]}]}""",
        "row",
        {
            "int_tensor": np.array([[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]], np.int32),
            "str_tensor": np.array([[b"foo", b"bar"], [b"baz", b"bat"]], object),
            "float_tensor": np.array([[1, np.nan], [2, np.inf]], np.float32),
            "dbl_tensor": np.array([[np.nan], [2]], np.float64),
        },
    ),
    "SingleUnnamedTensorColumnarFormat": (
        infomap(int_tensor=tf.int32),
        '{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]]}}',
        "columnar",
        {"int_tensor": np.array([[[1, 2], [3, 4], [5, 6]]], np.int32)},
    ),
    "SingleUnnamedTensorColumnarFormat (unnamed)": (
        infomap(int_tensor=tf.int32),
        '{"inputs": [[[1,2],[3,4],[5,6]]]}',
        "columnar",
        {"int_tensor": np.array([[[1, 2], [3, 4], [5, 6]]], np.int32)},
    ),
    "MultipleNamedTensorColumnarFormat": (
        infomap(int_tensor=tf.int32, str_tensor=tf.string, bin_tensor=tf.string),
        '{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]], "str_tensor": ["foo", "bar"], '
        '"bin_tensor": { "b64" : "aGVsbG8=" }}}',
        "columnar",
        {
            "int_tensor": np.array([[[1, 2], [3, 4], [5, 6]]], np.int32),
            "str_tensor": np.array([b"foo", b"bar"], object),
            "bin_tensor": np.array(b"hello", object),
        },
    ),
}


@pytest.mark.parametrize("case", FILL_CASES)
def test_json_to_tensors(case):
    infos, body, expected_format, expected = FILL_CASES[case]
    request, format, tensors = fill(body, infos)
    assert format == expected_format
    assert tensors.keys() == expected.keys()
    for name, array in expected.items():
        assert request.inputs[name].dtype == infos[name].dtype
        assert tensors[name].shape == array.shape
        if array.dtype == object:
            assert tensors[name].tolist() == array.tolist()
        else:
            np.testing.assert_array_equal(tensors[name], array)
    if "predict_images" in body:
        assert request.model_spec.signature_name == "predict_images"


FILL_ERRORS = [  # SingleUnnamedTensorErrors, MultipleNamedTensorErrors: (infomap, body, message)
    (infomap(default=tf.int32), "", "document is empty"),
    (infomap(default=tf.int32), '{"signature_name": 5, "instances": [[1,2],[3,4],[5,6,7]]}', "must be a string value"),
    (
        infomap(default=tf.int32),
        '{"instances": [[1,2],[3,4],[5,6,7]], "inputs": [[1,2],[3,4],[5,6,7]]}',
        "Not formatted correctly",
    ),
    (infomap(default=tf.int32), '{"instances": [[1,2],[3,4],[5,6,7]]}', "Expecting tensor size"),
    (infomap(default=tf.int32), '{"instances": [[1,2],[3,4],[[5,6]]]}', "Expecting shape"),
    (infomap(default=tf.int32), '{"instances": [1, [1]]}', "Expecting shape"),
    (infomap(default=tf.int32), '{"instances": [[1,2],["a", "b"]]}', "not of expected type"),
    (infomap(default=tf.float32), '{"instances": [1.79769e+308]}', "loss of precision"),
    (infomap(default=tf.float32), '{"instances": [16777217]}', "loss of precision"),
    (infomap(default=tf.float64), '{"instances": [9007199254740993]}', "loss of precision"),
    (
        infomap(int_tensor=tf.int32, str_tensor=tf.string),
        '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]}, '
        '{"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}',
        "Expecting shape",
    ),
    (
        infomap(int_tensor=tf.int32, str_tensor=tf.string),
        '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6],[7,8]], "str_tensor": ["foo", "bar"]}, '
        '{"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"]}]}',
        "Expecting tensor size",
    ),
    (
        infomap(int_tensor=tf.int32, str_tensor=tf.string),
        '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]}, [1, 20, 30], '
        '{"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}',
        "Expecting object but got list",
    ),
    (
        infomap(str_tensor=tf.string),
        '{"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]}',
        "Expecting value/list but got object",
    ),
]


@pytest.mark.parametrize("infos, body, message", FILL_ERRORS)
def test_json_to_tensors_errors(infos, body, message):
    with pytest.raises(ServingError, match="INVALID_ARGUMENT") as caught:
        fill(body, infos)
    assert message in str(caught.value)


def as_strings(text):
    """A JSON document with every number kept as its text (CompareJsonAllValuesAsStrings)."""
    return json.loads(text, parse_float=str, parse_int=str, parse_constant=str)


INT_2x3x2 = np.array([[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]], np.int32)
HELLO_BYTES = np.array([[b"hello", b"world"], [b"tf", b"serving"]], object)
TO_JSON_CASES = {  # test name: ({name: array}, format, expected JSON)
    "FromJsonSingleTensor (row)": (
        {"int_tensor": INT_2x3x2},
        "row",
        '{"predictions": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}',
    ),
    "FromJsonSingleTensor (columnar)": (
        {"int_tensor": INT_2x3x2},
        "columnar",
        '{"outputs": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}',
    ),
    "FromJsonSingleScalarTensor": (
        {"int_tensor": np.arange(1, 6, dtype=np.int32)},
        "row",
        '{"predictions": [1, 2, 3, 4, 5]}',
    ),
    "FromJsonSingleBytesTensor": (
        {"str_tensor_bytes": HELLO_BYTES},
        "row",
        '{"predictions": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}',
    ),
    "FromJsonSingleFloatTensorSixDigitPrecision": (
        {"float_tensor": np.array([[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]], np.float32)},
        "row",
        '{"predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]]}',
    ),
    "FromJsonSingleFloatTensorNonFinite": (
        {"float_tensor": np.array([[np.nan, np.inf], [3, -np.inf]], np.float32)},
        "row",
        '{"predictions": [[NaN, Infinity], [3.0, -Infinity]]}',
    ),
    "FromJsonMultipleNamedTensors (row)": (
        {
            "int_tensor": INT_2x3x2,
            "str_tensor": np.array([[b"foo", b"bar"], [b"baz", b"bat"]], object),
            "float_tensor": np.array([[1], [2]], np.float32),
            "double_scalar_tensor": np.array([8, 9], np.float64),
            "str_tensor_bytes": HELLO_BYTES,
        },
        "row",
        '{"predictions": [{"double_scalar_tensor": 8.0, "float_tensor": [1.0], "int_tensor": [[1, 2], [3, 4], [5, 6]],'
        ' "str_tensor": ["foo", "bar"], "str_tensor_bytes": [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}]},'
        ' {"double_scalar_tensor": 9.0, "float_tensor": [2.0], "int_tensor": [[7, 8], [9, 0], [1, 2]],'
        ' "str_tensor": ["baz", "bat"], "str_tensor_bytes": [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]}]}',
    ),
    "FromJsonMultipleNamedTensors (columnar)": (
        {
            "int_tensor": INT_2x3x2,
            "str_tensor": np.array([[b"foo", b"bar"], [b"baz", b"bat"]], object),
            "float_tensor": np.array([[1], [2]], np.float32),
            "double_scalar_tensor": np.array([8, 9], np.float64),
            "str_tensor_bytes": HELLO_BYTES,
        },
        "columnar",
        '{"outputs": {"double_scalar_tensor": [8.0, 9.0], "float_tensor": [[1.0], [2.0]],'
        ' "int_tensor": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]], "str_tensor": [["foo", "bar"], '
        '["baz", "bat"]], "str_tensor_bytes": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], '
        '[{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}}',
    ),
    "FromJsonSingleZeroBatchTensor": ({"int_tensor": np.zeros((0, 2), np.int32)}, "row", '{"predictions": []}'),
    "FromJsonMultipleZeroBatchTensors": (
        {"str_tensor": np.zeros((0, 1, 2), object), "float_tensor": np.zeros((0, 3, 4), np.float32)},
        "row",
        '{"predictions": []}',
    ),
}


@pytest.mark.parametrize("case", TO_JSON_CASES)
def test_tensors_to_json(case):
    tensors, format, expected = TO_JSON_CASES[case]
    assert as_strings(json_from_tensors(tensors, format)) == as_strings(expected)


@pytest.mark.parametrize(
    "tensors, message",
    [  # FromJsonSingleTensorErrors, FromJson*Errors
        ({}, "empty tensor map"),
        ({"tensor": np.array([1, 2], np.complex64)}, "tensor type: complex64"),
        ({"tensor": np.array(1, np.int32)}, "no shape information"),
        (
            {"int_tensor": np.zeros((2, 3), np.int32), "str_tensor": np.array([[b"foo", b"bar", b"baz"]], object)},
            "inconsistent batch size",
        ),
        (
            {"int_tensor": np.zeros((0, 2), np.int32), "str_tensor": np.array([[b"foo", b"bar"]], object)},
            "inconsistent batch size",
        ),
    ],
)
def test_tensors_to_json_errors(tensors, message):
    with pytest.raises(ServingError, match=f"INVALID_ARGUMENT: .*{message}"):
        json_from_tensors(tensors, "row")


# --- the server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Two versions of a tiny classifier (different weights), config labels stable=1 canary=2."""
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    config = BertConfig(
        vocab_size=len(SERVING_VOCAB),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    preprocessor = BertPreprocessor(BertTokenizer(SERVING_VOCAB), seq_length=None, max_seq_length=64)
    base = tmp_path_factory.mktemp("tiny")
    for version in (1, 2):
        tf.keras.utils.set_random_seed(version)
        export.export_for_serving(
            BertClassifier(BertEncoder(config), num_classes=3), preprocessor, base, version=version, labels=LABELS
        )
    # The ModelServerConfig text tensorflow_model_server reads (serving/models.config's form).
    config_file = base / "models.config"
    config_file.write_text(f"""model_config_list {{ config {{
        name: "tiny" base_path: "{base}" model_platform: "tensorflow"
        model_version_policy {{ all {{}} }}
        version_labels {{ key: "stable" value: 1 }} version_labels {{ key: "canary" value: 2 }} }} }}""")
    server = LocalModelServer(model_config_file=config_file, grpc_port=0, rest_port=0).start()
    references = {v: SessionPredictor(base / str(v), replay_warmup=False) for v in (1, 2)}
    logits = [references[v].predict_texts(text=["the fox"])["logits"] for v in (1, 2)]
    assert not np.allclose(*logits, rtol=1e-3), "the versions must answer differently to tell them apart"
    yield server, references
    server.stop()
    for predictor in references.values():
        predictor.close()


def request(server, method, path, body=b"", headers=None):
    """(status, headers, body) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        reply = connection.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        connection.close()


def rest_json(server, method, path, body=b""):
    status, headers, data = request(server, method, path, body.encode() if isinstance(body, str) else body)
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(data.decode("utf-8", "surrogateescape"))


def expected_rows(predictor, signature="serving_default", **inputs):
    outputs = predictor.predict_texts(signature, **inputs)
    return [{key: value[i] for key, value in outputs.items()} for i in range(len(outputs["logits"]))]


def assert_rows_match(rows, expected):
    assert len(rows) == len(expected)
    for row, reference in zip(rows, expected):
        np.testing.assert_allclose(row["logits"], reference["logits"], rtol=1e-6)
        assert row["labels"] == reference["labels"].decode()
        assert row["label_ids"] == reference["label_ids"]


@pytest.mark.slow
def test_path_regex(served):  # HttpRestApiHandlerTest.kPathRegex: only /v1/... is handled
    server, _ = served
    for path in ("/statuspage", "/index"):
        status, reply = rest_json(server, "GET", path)
        assert status == 404 and "error" in reply


@pytest.mark.parametrize(
    "method, path, message",
    [  # HttpRestApiHandlerTest.UnsupportedApiCalls
        ("GET", "/v1/foo", "Malformed request"),
        ("POST", "/v1/foo", "Malformed request"),
        ("GET", "/v1/models", "Missing model name"),
        ("GET", "/v1/models/debug/model_name", "Malformed request"),
        ("POST", "/v1/models", "Malformed request"),
        ("GET", "/v1/models/foo:predict", "Malformed request"),
        ("GET", "/v1/models/foo/version/50:predict", "Malformed request"),
        ("POST", "/v1/models/foo/version/50:regress", "Malformed request"),
        ("POST", "/v1/models/foo/versions/HELLO:regress", "Malformed request"),
        ("POST", f"/v1/models/foo/versions/{2**64 - 1}:regress", "Failed to convert version"),
        ("POST", "/v1/models/foo/metadata", "Malformed request"),
        ("POST", "/v1/models/foo/label/some_label:regress", "Malformed request"),
        ("POST", "/v1/models/foo/versions/50/labels/some_label:regress", "Malformed request"),
        ("POST", "/v1/models/foo/versions/some_label:regress", "Malformed request"),
        ("PUT", "/v1/models/tiny:predict", "Malformed request"),
        ("DELETE", "/v1/models/tiny", "Malformed request"),
    ],
)
def test_unsupported_api_calls(served, method, path, message):
    status, reply = rest_json(served[0], method, path)
    assert status == 400 and message in reply["error"]


@pytest.mark.parametrize(
    "path",
    [  # HttpRestApiHandlerTest.PredictModelNameVersionErrors
        "/v1/models/foo:predict",
        "/v1/models/foo/versions/50:predict",
        "/v1/models/tiny/versions/99:predict",
    ],
)
def test_predict_model_name_version_errors(served, path):
    status, reply = rest_json(served[0], "POST", path, '{ "instances": ["a"] }')
    assert status == 404 and "Servable not found" in reply["error"]


@pytest.mark.parametrize(
    "path, body, message",
    [  # HttpRestApiHandlerTest.PredictRequestErrors
        ("/v1/models/tiny:predict", "", "JSON Parse error: The document is empty"),
        ("/v1/models/tiny:predict", "instances = [1, 2]", "JSON Parse error: Invalid value"),
        (
            "/v1/models/tiny:predict",
            '{"signature_name": "serve_ids", "inputs": {"input_word_ids": [["x"]], '
            '"input_mask": [[1]], "input_type_ids": [[0]]}}',
            "not of expected type: int32",
        ),
        (
            "/v1/models/tiny/labels/Version_Nonexistent:predict",
            '{ "instances": ["x", "y"] }',
            "Unrecognized servable version label",
        ),
        ("/v1/models/tiny:predict", '{ "signature_name": 100 }', "'signature_name' key must be a string value."),
    ],
)
def test_predict_request_errors(served, path, body, message):
    status, reply = rest_json(served[0], "POST", path, body)
    assert status == 400 and message in reply["error"]


@pytest.mark.parametrize(
    "path, version",
    [  # HttpRestApiHandlerTest.Predict: latest, version, label
        ("/v1/models/tiny:predict", 2),
        ("/v1/models/tiny/versions/1:predict", 1),
        ("/v1/models/tiny/labels/stable:predict", 1),
        ("/v1/models/tiny/labels/canary:predict", 2),
        ("/V1/MODELS/tiny/VERSIONS/1:predict", 1),
    ],
)
def test_predict_routes_versions_and_labels(served, path, version):
    server, references = served
    texts = ["the quick brown fox", "中文!"]
    status, reply = rest_json(
        server, "POST", path, json.dumps({"signature_name": "serving_default", "instances": texts})
    )
    assert status == 200, reply
    assert_rows_match(reply["predictions"], expected_rows(references[version], text=texts))
    status, reply = rest_json(server, "POST", path, json.dumps({"inputs": texts}))
    assert status == 200
    np.testing.assert_allclose(
        reply["outputs"]["logits"], references[version].predict_texts(text=texts)["logits"], rtol=1e-6
    )


@pytest.mark.parametrize(
    "path, versions",
    [  # HttpRestApiHandlerTest.GetStatus
        ("/v1/models/tiny", ["2", "1"]),
        ("/v1/models/tiny/versions/1", ["1"]),
        # get_model_status_impl.cc does not resolve labels: all versions, as TF Serving answers.
        ("/v1/models/tiny/labels/stable", ["2", "1"]),
    ],
)
def test_get_status(served, path, versions):
    status, reply = rest_json(served[0], "GET", path)
    assert status == 200
    assert reply == {
        "model_version_status": [
            {"version": v, "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}} for v in versions
        ]
    }


@pytest.mark.parametrize(
    "path, message",
    [
        ("/v1/models/nope", "Could not find any versions of model nope"),
        ("/v1/models/tiny/versions/7", "Could not find version 7 of model tiny"),
    ],
)
def test_get_status_not_found(served, path, message):
    status, reply = rest_json(served[0], "GET", path)
    assert status == 404 and reply == {"error": message}


def test_get_model_metadata(served):  # HttpRestApiHandlerTest.GetModelMetadata
    from tensorflow_serving.apis import get_model_metadata_pb2

    server, references = served
    status, reply = rest_json(server, "GET", "/v1/models/tiny/versions/1/metadata")
    assert status == 200
    assert reply["model_spec"] == {"name": "tiny", "signature_name": "", "version": "1"}
    # The fields of TF Serving's own expected reply (saved_model_half_plus_two_2_versions_metadata.json).
    signatures = reply["metadata"]["signature_def"]["signature_def"]
    for signature in signatures.values():
        assert set(signature) == {"inputs", "outputs", "method_name", "defaults"}
        for info in [*signature["inputs"].values(), *signature["outputs"].values()]:
            assert set(info) == {"dtype", "tensor_shape", "name"}
            assert set(info["tensor_shape"]) == {"dim", "unknown_rank"}
            assert all(set(dim) == {"size", "name"} for dim in info["tensor_shape"]["dim"])
    assert signatures["serving_default"]["inputs"]["text"]["dtype"] == "DT_STRING"
    assert signatures["serve_ids"]["inputs"]["input_word_ids"]["tensor_shape"]["dim"] == [
        {"size": "-1", "name": ""},
        {"size": "-1", "name": ""},
    ]
    # and it is the export's own SignatureDefMap
    parsed = get_model_metadata_pb2.SignatureDefMap()
    from google.protobuf import json_format

    json_format.ParseDict(reply["metadata"]["signature_def"], parsed)
    assert dict(parsed.signature_def) == dict(references[1].meta_graph.signature_def)
    status, reply = rest_json(server, "GET", "/v1/models/tiny/labels/canary/metadata")
    assert status == 200 and reply["model_spec"]["version"] == "2"


# The deviations listed in issue 14, each with TF Serving's answer.
ISSUE_CASES = [
    ('{"instances": [{"b64": "dGhlIHF1aWNr"}]}', 200, None),
    ('{"inputs": {"text": [{"b64": "dGhlIHF1aWNr"}]}}', 200, None),
    ('{"inputs": {"b64": "dGhlIHF1aWNr"}}', 400, "must have rank 1"),  # a scalar, refused by the signature
    ('{"instances": [{"b64": "not base64!"}]}', 400, "Unable to base64 decode"),
    ('["the quick"]', 400, "Is not object"),
    ('{"signature_name": ["serving_default"], "instances": ["a"]}', 400, "'signature_name' key must be a string"),
    ('{"instances": [{"text": "a"}, {"txt": "b"}]}', 400, "does not have named input: txt"),
    ('{"instances": [{"text": "a"}, "b"]}', 400, "Expecting object but got list at item 1"),
    ('{"instances": ["a", {"text": "b"}]}', 400, "Expecting value/list but got object at item 1"),
    ('{"instances": [null]}', 400, "JSON Value: null Type: Null is not of expected type: string"),
    ('{"inputs": {"text": ["a", null]}}', 400, "Type: Null is not of expected type: string"),
    ('{"inputs": {"text": []}}', 200, None),  # an empty batch: string tensor of shape [0]
    ('{"signature_name": "serve_ids", "instances": [%s]}' % json.dumps(SERVE_IDS_ROW), 200, None),
    (
        '{"signature_name": "serve_ids", "instances": [%s, %s]}'
        % (json.dumps(SERVE_IDS_ROW), json.dumps({**SERVE_IDS_ROW, "extra": [1]})),
        400,
        "does not have named input: extra",
    ),
    (
        '{"signature_name": "serve_ids", "instances": [%s]}' % json.dumps({**SERVE_IDS_ROW, "input_mask": [1.0] * 4}),
        400,
        "is not of expected type: int32",
    ),
    (
        '{"signature_name": "serve_ids", "instances": [%s]}' % json.dumps({**SERVE_IDS_ROW, "input_mask": [2**31] * 4}),
        400,
        "is not of expected type: int32",
    ),
    (
        '{"signature_name": "serve_ids", "inputs": {"input_word_ids": [[]], "input_mask": [[]], '
        '"input_type_ids": [[]]}}',
        400,
        "out of bounds",
    ),  # int32 [1, 0] reaches the graph, which refuses it
    ('{"signature_name": "serve_ids", "instances": [{"input_word_ids": [2, 3]}]}', 400, "keys must be equal to"),
    ('{"signature_name": "serve_ids", "inputs": {"input_word_ids": [[2, 3]]}}', 400, "Missing named input"),
    ('{"signature_name": "nope", "instances": ["a"]}', 400, 'Serving signature name: "nope" not found'),
    ('{"instances": ["a"], "inputs": ["a"]}', 400, "expecting only one of 'inputs' or 'instances'"),
    ('{"signature_name": "serving_default"}', 400, "Missing 'inputs' or 'instances' key"),
    ('{"instances": {"text": "a"}}', 400, "Excepting 'instances' to be an list/array"),
    ('{"instances": [["a"]]}', 400, "must have rank 1"),
    ('{"instances": [[["a"], "b"]]}', 400, "found at incorrect level"),
    ('{"instances": [1]}', 400, "JSON Value: 1 Type: Number is not of expected type: string"),
    ('{"instances": [true]}', 400, "Type: True is not of expected type: string"),
    ('{"instances": ["\\ud800"]}', 400, "The surrogate pair in string is invalid."),
    ('{"signature_name": "\\udcff", "instances": ["a"]}', 400, "not found in signature def"),
]


@pytest.mark.parametrize("body, status, message", ISSUE_CASES)
def test_request_vectors(served, body, status, message):
    got, reply = rest_json(served[0], "POST", "/v1/models/tiny:predict", body)
    assert got == status, reply
    if message:
        assert message in reply["error"]
    else:
        assert "predictions" in reply or "outputs" in reply


def test_b64_and_non_utf8_strings_reach_the_model_as_bytes(served):
    server, references = served
    raw = b"the quick fox" + b"\xff\xfe"  # not UTF-8: JSON can carry it only as b64 or raw bytes
    expected = expected_rows(references[2], text=[raw])
    status, b64_reply = rest_json(
        server, "POST", "/v1/models/tiny:predict", json.dumps({"instances": [{"b64": base64.b64encode(raw).decode()}]})
    )
    assert status == 200
    assert_rows_match(b64_reply["predictions"], expected)
    # rapidjson does not validate UTF-8: raw bytes inside a JSON string pass through as they are.
    status, raw_reply = rest_json(server, "POST", "/v1/models/tiny:predict", b'{"instances": ["' + raw + b'"]}')
    assert status == 200 and raw_reply == b64_reply
    status, reply = rest_json(server, "POST", "/v1/models/tiny:predict", b"\xff\xfe{")
    assert status == 400 and "JSON Parse error" in reply["error"]


def test_empty_batch_answers_empty_lists(served):  # FromJsonSingleZeroBatchTensor through the model
    status, reply = rest_json(served[0], "POST", "/v1/models/tiny:predict", '{"inputs": {"text": []}}')
    assert status == 200
    assert reply == {"outputs": {"label_ids": [], "labels": [], "logits": [], "probabilities": []}}


def test_classify_and_regress_need_their_signature_methods(served):
    for method, kind in (("classify", "classification"), ("regress", "regression")):
        status, reply = rest_json(served[0], "POST", f"/v1/models/tiny:{method}", '{"examples": [{"x": 1.0}]}')
        assert status == 400
        assert reply["error"] == (
            f"Expected {kind} signature method_name to be tensorflow/serving/{method}. Was: tensorflow/serving/predict"
        )


# --- raw HTTP: the server answers every request and stays up -------------------------


def raw_exchange(server, data):
    """Bytes sent on a raw socket -> (status line, body) of the reply."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode("latin-1"), body


@pytest.mark.parametrize(
    "data, status",
    [
        (b'POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{"instances"', "400"),
        (b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", "400"),
        (b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n{}", "400"),
        (b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\n\r\n", "400"),
        (b"GARBAGE / HTTP/1.1 EXTRA\r\n\r\n", "400"),
        (b"BREW /v1/models/tiny HTTP/1.1\r\nHost: x\r\n\r\n", "501"),
        (
            b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'4\r\n{"in\r\n11\r\nstances": ["a"]}\r\n0\r\n\r\n',
            "200",
        ),
        (b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "400"),
    ],
)
def test_raw_http(served, data, status):
    line, body = raw_exchange(served[0], data)
    assert line.split(" ")[1] == status, line
    reply = json.loads(body)
    assert ("error" in reply) == (status != "200")


def test_keep_alive_survives_errors(served):
    server, _ = served
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    try:
        for body, status in (
            (b"{bad", 400),
            (b'{"instances": ["a"]}', 200),
            (b"\x00", 400),
            (b'{"inputs": ["a"]}', 200),
        ):
            connection.request("POST", "/v1/models/tiny:predict", body=body)
            reply = connection.getresponse()
            document = json.loads(reply.read())
            assert reply.status == status
            assert ("error" in document) == (status != 200)
    finally:
        connection.close()


VALID_BODIES = [
    json.dumps({"instances": ["the quick fox"]}),
    json.dumps({"inputs": {"text": ["a", "b"]}}),
    json.dumps({"signature_name": "serve_ids", "instances": [SERVE_IDS_ROW]}),
]
PATHS = [
    "/v1/models/tiny:predict",
    "/v1/models/tiny/versions/1:predict",
    "/v1/models/tiny/labels/stable:predict",
    "/v1/models/tiny",
    "/v1/models/tiny/metadata",
    "/v1/models/tiny:classify",
    "/v1/models/x:predict",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "\udcff", "a\x00b", "\U0001f600"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["instances", "inputs", "signature_name", "text", "b64", "input_word_ids"])
            | st.text(max_size=4),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def mutate(body, data):
    """A valid body with one byte replaced, deleted or inserted, or cut short."""
    raw = bytearray(body.encode())
    at = data.draw(st.integers(0, len(raw) - 1))
    how = data.draw(st.sampled_from(["replace", "delete", "insert", "truncate"]))
    if how == "replace":
        raw[at] = data.draw(st.integers(0, 255))
    elif how == "delete":
        del raw[at]
    elif how == "insert":
        raw.insert(at, data.draw(st.integers(0, 255)))
    else:
        del raw[at:]
    return bytes(raw)


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_fuzz_every_request_gets_a_json_answer(served, data):
    server, _ = served
    kind = data.draw(st.sampled_from(["bytes", "json", "instances", "mutated", "path"]))
    method, path = "POST", data.draw(st.sampled_from(PATHS))
    if kind == "bytes":
        body = data.draw(st.binary(max_size=64))
    elif kind == "json":
        body = json.dumps(data.draw(json_values)).encode()
    elif kind == "instances":  # random values where the tensors go, for either signature
        key = data.draw(st.sampled_from(["instances", "inputs"]))
        body = json.dumps(
            {
                "signature_name": data.draw(st.sampled_from(["serving_default", "serve_ids"])),
                key: data.draw(st.lists(json_values, min_size=1, max_size=3)),
            }
        ).encode()
    elif kind == "mutated":
        body = mutate(data.draw(st.sampled_from(VALID_BODIES)), data)
    else:
        method = data.draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
        path = "/v1/models" + "".join(
            data.draw(
                st.lists(
                    st.sampled_from(
                        [
                            "/tiny",
                            "/versions/1",
                            "/versions/x",
                            "/labels/stable",
                            "/metadata",
                            ":predict",
                            "/%FF",
                            "/%20",
                            "?q=1",
                            "/",
                            ":",
                            "//",
                            "/versions/99999999999999999999",
                            "/labels/%ED%A0%80",
                            "/tiny%00",
                            ":classify",
                        ]
                    ),
                    max_size=5,
                )
            )
        )
        body = data.draw(st.sampled_from([b""] + [b.encode() for b in VALID_BODIES]))
    status, headers, reply = request(server, method, path, body)
    assert headers["Content-Type"] == "application/json"
    document = json.loads(reply.decode("utf-8", "surrogateescape"))
    assert status != 500, document  # INTERNAL: the server failed where TF Serving answers
    if status != 200:
        assert isinstance(document["error"], str), document
    else:
        assert set(document) & {"predictions", "outputs", "model_version_status", "model_spec"}
    # the server is still up and answers a valid request
    status, _, reply = request(server, "POST", "/v1/models/tiny:predict", VALID_BODIES[0].encode())
    assert status == 200 and json.loads(reply)["predictions"]


# --- gRPC ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stubs(served):
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{served[0].grpc_port}")
    yield (prediction_service_pb2_grpc.PredictionServiceStub(channel), model_service_pb2_grpc.ModelServiceStub(channel))
    channel.close()


def grpc_error(call, request):
    import grpc

    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)
    return caught.value.code().name, caught.value.details()


@pytest.mark.parametrize(
    "spec, version",
    [
        ("name: 'tiny'", 2),
        ("name: 'tiny' version { value: 1 }", 1),
        ("name: 'tiny' version_label: 'stable'", 1),
        ("name: 'tiny' version_label: 'canary'", 2),
    ],
)
def test_grpc_predict_routes_and_names_the_version(served, stubs, spec, version):
    server, references = served
    request = make_request("", "", {"text": ["the quick brown fox"]})
    text_format.Parse(spec, request.model_spec)
    response = stubs[0].Predict(request, timeout=30)
    assert (response.model_spec.name, response.model_spec.version.value) == ("tiny", version)
    assert response.model_spec.signature_name == "serving_default"  # predict_util.cc MakeModelSpec
    np.testing.assert_allclose(
        decode_response(response)["logits"],
        references[version].predict_texts(text=["the quick brown fox"])["logits"],
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    "spec, signature, code, message",
    [
        ("name: 'tiny'", "nope", "FAILED_PRECONDITION", 'Serving signature key "nope" not found.'),  # predict_util.cc
        ("name: 'other'", "", "NOT_FOUND", "Servable not found for request: Latest(other)"),
        ("name: 'tiny' version { value: 5 }", "", "NOT_FOUND", "Servable not found for request: Specific(tiny, 5)"),
        ("name: 'tiny' version_label: 'beta'", "", "INVALID_ARGUMENT", "Unrecognized servable version label: beta"),
    ],
)
def test_grpc_predict_errors(stubs, spec, signature, code, message):
    request = make_request("", signature, {"text": ["a"]})
    text_format.Parse(spec, request.model_spec)
    assert grpc_error(stubs[0].Predict, request) == (code, message)


@pytest.mark.parametrize(
    "tensor",
    [
        "dtype: DT_STRING tensor_shape { dim { size: 1 } } tensor_content: '\\377\\377'",
        "dtype: DT_STRING tensor_shape { dim { size: -5 } }",
        "dtype: DT_STRING tensor_shape { dim { size: 1000000000000 } } string_val: 'a'",
    ],
)
def test_grpc_malformed_tensor_protos(stubs, tensor):
    request = make_request("tiny", "", {})
    text_format.Parse(tensor, request.inputs["text"])
    assert grpc_error(stubs[0].Predict, request) == ("INVALID_ARGUMENT", "tensor parsing error: text")


def test_grpc_metadata_and_status(served, stubs):
    from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2

    server, references = served
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "tiny"
    response = stubs[0].GetModelMetadata(request, timeout=30)
    assert (response.model_spec.name, response.model_spec.version.value) == ("tiny", 2)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signatures)
    assert dict(signatures.signature_def) == dict(references[2].meta_graph.signature_def)
    # get_model_metadata_impl.cc's checks
    assert grpc_error(
        stubs[0].GetModelMetadata, get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    ) == ("INVALID_ARGUMENT", "Missing ModelSpec")
    request.ClearField("metadata_field")
    assert grpc_error(stubs[0].GetModelMetadata, request)[0] == "INVALID_ARGUMENT"
    request.metadata_field.append("labels")
    assert grpc_error(stubs[0].GetModelMetadata, request)[0] == "INVALID_ARGUMENT"
    # get_model_status_impl.cc
    status = stubs[1].GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "tiny"}), timeout=30
    )
    assert [(s.version, s.state, s.status.error_code) for s in status.model_version_status] == [
        (v, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0) for v in (2, 1)
    ]
    assert grpc_error(stubs[1].GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) == (
        "INVALID_ARGUMENT",
        "Missing ModelSpec",
    )
    assert grpc_error(
        stubs[1].GetModelStatus, get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "nope"})
    ) == ("NOT_FOUND", "Could not find any versions of model nope")
    assert grpc_error(
        stubs[1].GetModelStatus,
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "tiny", "version": {"value": 3}}),
    ) == ("NOT_FOUND", "Could not find version 3 of model tiny")


def test_grpc_classify_on_a_predict_signature(stubs):
    from tensorflow_serving.apis import classification_pb2

    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "tiny"
    code, message = grpc_error(stubs[0].Classify, request)
    assert code == "INVALID_ARGUMENT" and "Expected classification signature method_name" in message


# --- ServingClient -----------------------------------------------------------------------


def test_client_metadata_and_status_agree_across_protocols(served):
    server, references = served
    client = ServingClient("127.0.0.1", "tiny", server.grpc_port, server.rest_port, timeout=30)
    metadata = client.metadata()
    assert metadata == client.metadata_rest()
    assert set(metadata) == set(references[2].meta_graph.signature_def)
    assert metadata["serve_ids"]["inputs"]["input_mask"]["dtype"] == "DT_INT32"
    assert (
        client.status()
        == client.status_rest()
        == [
            {"version": v, "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
            for v in ("2", "1")
        ]
    )
    pinned = ServingClient("127.0.0.1", "tiny", server.grpc_port, server.rest_port, timeout=30, version=1)
    assert pinned.status() == pinned.status_rest() == [client.status()[1]]
    with pytest.raises(ValueError):
        ServingClient(version=1, version_label="stable")


@pytest.mark.parametrize("format", ["row", "columnar"])
def test_client_sends_bytes_as_b64(served, format):
    server, references = served
    texts = [b"the quick \xff fox", "中文".encode() + b"\x80"]  # not UTF-8
    client = ServingClient("127.0.0.1", "tiny", server.grpc_port, server.rest_port, timeout=30, version_label="stable")
    expected = references[1].predict_texts(text=np.array(texts, object))
    np.testing.assert_allclose(client.predict(text=np.array(texts, object))["logits"], expected["logits"], rtol=1e-6)
    out = client.predict_rest(format=format, text=texts)
    logits = [row["logits"] for row in out] if format == "row" else out["logits"]
    np.testing.assert_allclose(logits, expected["logits"], rtol=1e-6)


def test_client_serve_ids_over_rest(served):
    server, references = served
    ids = {name: np.array([value], np.int32) for name, value in SERVE_IDS_ROW.items()}
    client = ServingClient("127.0.0.1", "tiny", server.grpc_port, server.rest_port, timeout=30, version=1)
    expected = references[1].predict_texts("serve_ids", **ids)["logits"]
    for format in ("row", "columnar"):
        out = client.predict_rest("serve_ids", format=format, **ids)
        np.testing.assert_allclose(
            [row["logits"] for row in out] if format == "row" else out["logits"], expected, rtol=1e-6
        )


def test_rest_error_replies_are_json_strings(served):  # MakeJsonFromStatus: the message as a JSON string
    status, reply = rest_json(served[0], "POST", "/v1/models/tiny:predict", '{"instances": [{"t\\"e\'xt": 1}]}')
    assert status == 400 and "does not have named input: t\"e'xt" in reply["error"]


@pytest.mark.slow
def test_model_config_errors(tmp_path, served):
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    server, references = served
    base = references[1].export_path.parent
    config = tmp_path / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "tiny" base_path: "{base}" '
        f'version_labels {{ key: "stable" value: 1 }} }} }}'
    )  # latest policy: only version 2 loads
    with pytest.raises(ValueError, match="Request to assign label to version 1 of model tiny"):
        LocalModelServer(model_config_file=config, grpc_port=0, rest_port=0)
    config.write_text(f'model_config_list {{ config {{ name: "tiny" base_path: "{tmp_path}" }} }}')
    with pytest.raises(FileNotFoundError, match="no version directories"):
        LocalModelServer(model_config_file=config, grpc_port=0, rest_port=0)

"""The page to try each served model in a browser, beside TF Serving's REST API.

`GET /` (the served models) and `GET /models/NAME` (one model) answer `model_page.html`,
whose script reads its own path; it reads `GET /models.json` (the served models) and
`GET /models/NAME/info` (a model's head kind, labels and text inputs in order), then calls
`POST /v1/models/NAME:predict` as any client does. None of these paths starts with `/v1/`,
so TF Serving's own paths answer as before.
"""

import json
import re
import urllib.parse
from importlib import resources

from bert_keras.serving.batch.saved_model import recorded_kind
from bert_keras.serving.export import WORD_PIECES_SIGNATURE, served_labels
from bert_keras.tasks.span_labeler import SPAN_CANDIDATES_SIGNATURE

PAGE_FILE = "model_page.html"
# The page is its own script and style; it may talk to this server only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:"
)
_PAGE_PATH = re.compile(r"/|/models/([^/]+)/?")
_INFO_PATH = re.compile(r"/models/([^/]+)/info")


def page_reply(server, method, path):
    """(status, content type, bytes) of a page request to `server` (a `LocalModelServer`);
    None for a path that is not the page's."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    if method not in ("GET", "HEAD"):
        return None
    if path == "/models.json":
        models = [model_info(model) for _, model in sorted(server.models.items())]
        return _json(200, {"models": models})
    info = _INFO_PATH.fullmatch(path)
    if info:
        model = server.models.get(urllib.parse.unquote(info.group(1)))
        if model is None:
            return _json(404, {"error": f"no model named {urllib.parse.unquote(info.group(1))!r} is served"})
        return _json(200, model_info(model))
    if _PAGE_PATH.fullmatch(path):
        page = resources.files(__package__).joinpath(PAGE_FILE).read_bytes()
        return 200, "text/html; charset=utf-8", page
    return None


def model_info(model):
    """What the page needs to know of a `ServedModel` (its newest version) beyond its
    signature metadata: the head kind, the label names, the text inputs in the order the
    export declared them, and whether it answers the word pieces it reads and (a span
    reader) its best spans."""
    version = max(model.versions)
    predictor = model.versions[version]
    signature = predictor.signatures.get("serving_default")
    outputs = set(signature.outputs) if signature is not None else set()
    return {
        "name": model.name,
        "version": version,
        "head_kind": recorded_kind(predictor.export_path, outputs),
        "labels": served_labels(predictor.export_path),
        "segments": declared_inputs(predictor.meta_graph, "serving_default") if signature is not None else [],
        "word_pieces": WORD_PIECES_SIGNATURE if WORD_PIECES_SIGNATURE in predictor.signatures else None,
        "span_candidates": SPAN_CANDIDATES_SIGNATURE if SPAN_CANDIDATES_SIGNATURE in predictor.signatures else None,
    }


def declared_inputs(meta_graph, name):
    """The input names of signature `name` in the order of its function's arguments, as
    the SavedModel's object graph records them (a SignatureDef's inputs are a map, so
    the names sorted where the object graph does not say)."""
    graph = meta_graph.object_graph_def
    for child in graph.nodes[0].children if graph.nodes else ():
        if child.local_name == name:
            traced = _traced_function(graph.nodes[child.node_id])
            if traced is not None:
                arguments = graph.concrete_functions[traced].canonicalized_input_signature
                return [value.tensor_spec_value.name for value in arguments.tuple_value.values[0].tuple_value.values]
    return sorted(meta_graph.signature_def[name].inputs)


def _traced_function(node):
    """The name of the traced function an object graph node saves: a `tf.function`'s first
    trace, or a concrete function saved as it is (as `bert_keras` exports save them)."""
    kind = node.WhichOneof("kind")
    if kind == "function" and node.function.concrete_functions:
        return node.function.concrete_functions[0]
    if kind == "bare_concrete_function":
        return node.bare_concrete_function.concrete_function_name
    return None


def _json(status, value):
    return status, "application/json", json.dumps(value, ensure_ascii=False).encode("utf-8")

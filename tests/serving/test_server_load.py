"""`bert-keras serve` under load and abuse, as TF Serving holds up: hundreds of connections
at once, oversized and stalled requests, and batches larger than one run's memory."""

import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest
from harness import SERVING_VOCAB

from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.serving import export
from bert_keras.serving.client import ServingClient
from bert_keras.serving.tfserving.session import ServingError, make_request

LIMIT = 1 << 20  # max_request_bytes of the server under test
BODY = json.dumps({"instances": [{"text": "the quick brown fox"}, {"text": "a b c!"}]}).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
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
    base = tmp_path_factory.mktemp("load")
    export.export_for_serving(BertEncoder(config), preprocessor, base, version=1)
    server = LocalModelServer(
        base, name="tiny", grpc_port=0, rest_port=0, max_request_bytes=LIMIT, max_batch_rows=64, request_timeout=2.0
    ).start()
    yield server
    server.stop()


def post(port, body, connection=None):
    connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("POST", "/v1/models/tiny:predict", body=body, headers={"Content-Type": "application/json"})
    reply = connection.getresponse()
    return reply.status, json.loads(reply.read())


@pytest.mark.slow
def test_256_concurrent_connections_are_all_answered(server):
    """Each client opens its connection at the same moment and sends 2 requests on it."""
    clients, start = 256, threading.Barrier(256)
    results, lock = [], threading.Lock()

    def client():
        try:
            connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=120)
            start.wait()
            outcome = [post(server.rest_port, BODY, connection)[0] for _ in range(2)]
            connection.close()
        except Exception as caught:  # a reset or refusal is what is counted
            outcome = [f"{type(caught).__name__}: {caught}"]
        with lock:
            results.extend(outcome)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    failures = [result for result in results if result != 200]
    assert not failures and len(results) == 2 * clients, failures[:5]


def test_an_oversized_body_is_refused_unread(server):
    """Content-Length over the limit: 413 with TF Serving's {"error"} body at once, while
    the client is still sending; the server goes on answering."""
    size = 50 * LIMIT
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as sock:
        began = time.monotonic()
        sock.sendall(
            b"POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % size + b"{" * 1000
        )
        reply = sock.recv(65536)
        elapsed = time.monotonic() - began
        while chunk := sock.recv(65536):  # the rest of the answer, until the server closes
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:200]
    assert (
        f"Request body of {size} bytes is larger than the server's limit of {LIMIT} bytes" in json.loads(body)["error"]
    )
    assert elapsed < 5
    # A whole oversized body sent by a normal client: it gets the answer too, not a reset.
    status, document = post(server.rest_port, b" " * (3 * LIMIT))
    assert status == 413 and "error" in document
    assert post(server.rest_port, BODY)[0] == 200


def test_an_oversized_chunked_body_is_cut_off(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=30)
    chunks = (b" " * (256 << 10) for _ in range(16))  # 4 MiB in 256 KiB chunks
    connection.request(
        "POST", "/v1/models/tiny:predict", body=chunks, encode_chunked=True, headers={"Transfer-Encoding": "chunked"}
    )
    reply = connection.getresponse()
    assert reply.status == 413 and "larger than the server's limit" in json.loads(reply.read())["error"]


def test_grpc_oversized_request_is_resource_exhausted(server):
    client = ServingClient("127.0.0.1", model="tiny", grpc_port=server.grpc_port, timeout=30, retries=0)
    with pytest.raises(ServingError, match="RESOURCE_EXHAUSTED"):
        client.predict(text=["the fox " * 1000] * 200)  # about 1.6 MB
    assert client.predict(text=["the fox"])["pooled_output"].shape == (1, 16)


def test_a_stalled_request_is_dropped_and_others_are_served(server):
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as stalled:
        stalled.sendall(b'POST /v1/models/tiny:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"in')
        began = time.monotonic()
        assert post(server.rest_port, BODY)[0] == 200  # served meanwhile
        reply = stalled.recv(65536)
        waited = time.monotonic() - began
        while chunk := stalled.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400") and b"did not arrive within 2 s" in reply, reply[:300]
    assert waited < 60  # the request timeout, not the idle-connection timeout


def test_a_large_batch_runs_in_slices_with_the_same_answers(server):
    """600 texts of mixed lengths, run 64 rows at a time, equal one padded run (per-token
    outputs where there are tokens: at padding, each run holds what it computed there)."""
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(SERVING_VOCAB[5:], size=rng.integers(0, 30))) for _ in range(600)]
    request = make_request("tiny", "serving_default", {"text": texts})
    model = server.models["tiny"].versions[1]
    _, whole = model.run(request)
    _, sliced = model.run(request, max_rows=64)
    assert set(whole) == set(sliced)
    mask = whole["input_mask"].astype(bool)
    np.testing.assert_array_equal(sliced["input_mask"], whole["input_mask"])
    for key in whole:
        assert sliced[key].shape == whole[key].shape, key
        tokens = whole[key].ndim > 1 and whole[key].shape[1] == mask.shape[1]
        np.testing.assert_allclose(
            sliced[key][mask] if tokens else sliced[key],
            whole[key][mask] if tokens else whole[key],
            atol=1e-5,
            err_msg=key,
        )
    # ...and the served answer is that one.
    rows = ServingClient("127.0.0.1", model="tiny", rest_port=server.rest_port, timeout=120).predict_rest(text=texts)
    np.testing.assert_allclose([row["pooled_output"] for row in rows], whole["pooled_output"], atol=1e-5)

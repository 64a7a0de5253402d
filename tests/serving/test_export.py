"""SavedModel export, checked the way TF Serving runs it (TF1 session loader, PredictRequests)."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REFERENCE, require
from harness import BAD_TEXTS, SERVING_VOCAB, VARIED_TEXTS

from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
from bert_keras.models.dtype import with_dtype
from bert_keras.serving import export
from bert_keras.serving.client import ServingClient
from bert_keras.serving.ops import check_serving_ops
from bert_keras.serving.serving_tasks import MIN_MICRO_BATCH, tokenize_masked
from bert_keras.serving.tfserving.session import ServingError, SessionPredictor, make_request


@pytest.fixture(scope="module")
def minilm_exports(tmp_path_factory, minilm_dir):
    """The real all-MiniLM-L6-v2 encoder exported with a single-text and a text-pair signature."""
    encoder = BertEncoder.from_checkpoint(minilm_dir)
    tokenizer = BertTokenizer(minilm_dir / "vocab.txt", lower_case=True)
    base = tmp_path_factory.mktemp("minilm")
    # The reference packed to 128 with longest_first truncation; pad dynamically up to that.
    preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=128)
    single = export.export_for_serving(encoder, preprocessor, base / "single", version=1)
    pair = export.export_for_serving(encoder, preprocessor, base / "pair", version=1, segments=("text_a", "text_b"))
    return encoder, preprocessor, single, pair


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    config = BertConfig(
        vocab_size=len(SERVING_VOCAB),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    encoder = BertEncoder(config)
    preprocessor = BertPreprocessor(BertTokenizer(SERVING_VOCAB), seq_length=None, max_seq_length=64)
    path = export.export_for_serving(encoder, preprocessor, tmp_path_factory.mktemp("tiny"), version=3)
    return encoder, preprocessor, path


@pytest.mark.slow
def test_raw_text_through_tf_serving_loader_matches_hugging_face(minilm_exports):
    """Strings -> exported graph (TF1 loader, PredictRequest protos) == HF PyTorch outputs."""
    _, _, single, pair = minilm_exports
    ref = np.load(require(REFERENCE / "minilm_l6_encoder.npz"))
    texts = json.loads(require(REFERENCE / "minilm_l6_encoder_inputs.json").read_text())
    lengths = ref["input_mask"].sum(axis=1)
    singles = [i for i, t in enumerate(texts) if t["text_b"] is None]
    pairs = [i for i, t in enumerate(texts) if t["text_b"] is not None]
    for path, rows, inputs in (
        (single, singles, lambda rows: {"text": [texts[i]["text_a"] for i in rows]}),
        (
            pair,
            pairs,
            lambda rows: {"text_a": [texts[i]["text_a"] for i in rows], "text_b": [texts[i]["text_b"] for i in rows]},
        ),
    ):
        predictor = SessionPredictor(path)
        out = predictor.predict_texts(**inputs(rows))
        assert out["input_mask"].sum(axis=1).tolist() == lengths[rows].tolist()
        np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"][rows], atol=1e-4)
        for j, row in enumerate(rows):
            n = lengths[row]
            np.testing.assert_allclose(out["sequence_output"][j, :n], ref["sequence_output"][row, :n], atol=1e-4)
        predictor.close()


@pytest.mark.slow
def test_layout_warmup_and_serve_ids(minilm_exports, minilm_dir):
    encoder, preprocessor, single, _ = minilm_exports
    assert single.name == "1"
    assert (single / "saved_model.pb").exists() and (single / "variables").is_dir()
    assert (single / "assets" / "vocab.txt").read_text() == (minilm_dir / "vocab.txt").read_text()
    predictor = SessionPredictor(single)
    assert len(predictor.warmup_responses) == 2, "the warm-up file was not replayed"
    texts = list(export.DEFAULT_WARMUP_TEXTS)
    packed = preprocessor(tf.constant(texts))
    expected = encoder(packed)
    warm = {k: tf.make_ndarray(v) for k, v in predictor.warmup_responses[0].outputs.items()}
    np.testing.assert_allclose(warm["pooled_output"], expected["pooled_output"], atol=1e-5)
    by_ids = predictor.predict_texts("serve_ids", **{k: v.numpy() for k, v in packed.items()})
    np.testing.assert_allclose(by_ids["pooled_output"], expected["pooled_output"], atol=1e-5)
    assert by_ids["pooled_output"].dtype == np.float32


@pytest.mark.slow
def test_op_gate(tiny_export):
    _, _, path = tiny_export
    found = check_serving_ops(path, "2.12")
    assert "FastWordpieceTokenizeWithOffsets" in found
    with pytest.raises(ValueError, match="FastWordpieceTokenizeWithOffsets"):
        check_serving_ops(path, "2.9")


# TensorFlow's `saved_model_cli`, once for each command line given as a JSON argument, in
# one Python: its absl flags are cleared between commands, and each command's output
# follows a `==> command` line.
SAVED_MODEL_CLI = """
import json, sys, tensorflow_text
from absl import flags
from tensorflow.python.tools import saved_model_cli
for argv in json.loads(sys.argv[1]):
    print("==>", argv[0], flush=True)
    sys.argv = ["saved_model_cli", *argv]
    try:
        saved_model_cli.main()
    except SystemExit as exit:
        if exit.code:
            raise
    flags.FLAGS.unparse_flags()
"""


@pytest.mark.slow
def test_saved_model_cli_show_and_run(tiny_export, tmp_path):
    _, _, path = tiny_export
    commands = [
        ["show", "--dir", str(path), "--all"],
        ["run", "--dir", str(path), "--tag_set", "serve", "--signature_def", "serving_default"]
        + ["--input_exprs", "text=['the quick fox!']", "--outdir", str(tmp_path), "--overwrite"],
    ]
    cli = subprocess.run(
        [sys.executable, "-c", SAVED_MODEL_CLI, json.dumps(commands)], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 0, cli.stderr
    show = cli.stdout.split("==> run")[0]
    assert "signature_def['serving_default']" in show
    assert "inputs['text'] tensor_info" in show
    pooled = np.load(tmp_path / "pooled_output.npy")
    encoder, preprocessor, _ = tiny_export
    expected = encoder(preprocessor(tf.constant(["the quick fox!"])))["pooled_output"]
    np.testing.assert_allclose(pooled, expected, atol=1e-5)


@pytest.mark.slow
def test_bad_text_gives_valid_outputs(tiny_export):
    encoder, preprocessor, path = tiny_export
    predictor = SessionPredictor(path)
    out = predictor.predict_texts(
        text=np.array([t if isinstance(t, bytes) else t.encode() for t in BAD_TEXTS], dtype=object)
    )
    assert np.isfinite(out["pooled_output"]).all() and np.isfinite(out["sequence_output"]).all()
    assert out["pooled_output"].shape == (len(BAD_TEXTS), 16)
    assert out["input_mask"].shape[1] <= 64, "the 1 MB text must be truncated to max_seq_length"
    lengths = out["input_mask"].sum(axis=1)
    assert lengths[0] == 2 and lengths[1] == 2, "empty and blank texts give [CLS] [SEP]"
    big = predictor.predict_texts(text=["the quick brown fox"] * 1000)
    assert big["pooled_output"].shape == (1000, 16)
    empty = predictor.predict_texts(text=np.array([], dtype=object).astype(bytes))
    assert empty["pooled_output"].shape == (0, 16)


@pytest.mark.slow
def test_micro_batches_equal_one_padded_batch(tiny_export):
    """Length-sorted micro-batches give the in-Python model's outputs on the whole padded
    batch, in request order; padding positions of per-token outputs are zero."""
    encoder, preprocessor, path = tiny_export
    out = SessionPredictor(path).predict_texts(text=VARIED_TEXTS)
    packed = preprocessor(tf.constant(VARIED_TEXTS))
    expected = encoder(packed)
    mask = packed["input_mask"].numpy()
    np.testing.assert_array_equal(out["input_mask"], mask)
    np.testing.assert_allclose(out["pooled_output"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(
        out["sequence_output"] * mask[..., None], expected["sequence_output"] * mask[..., None], atol=1e-5
    )
    lengths = mask.sum(axis=1)
    size = max(MIN_MICRO_BATCH, -(-len(VARIED_TEXTS) // 4))
    shortest = np.argsort(lengths, kind="stable")[:size]  # the first micro-batch
    assert lengths[shortest].max() < mask.shape[1], "the shortest micro-batch must be cut"
    assert (out["sequence_output"][shortest][:, lengths[shortest].max() :] == 0).all()


@pytest.mark.slow
def test_bfloat16_stays_close_to_float32_on_real_weights(minilm_exports):
    """The bfloat16 export's model: bfloat16 matmuls on a float32 residual stream keep
    pooled outputs within 1e-2 of float32 (the export path itself: test below)."""
    encoder, preprocessor, _, _ = minilm_exports
    texts = [t["text_a"] for t in json.loads(require(REFERENCE / "minilm_l6_encoder_inputs.json").read_text())]
    packed = preprocessor(tf.constant(texts))
    bfloat16 = with_dtype(encoder, "bfloat16")
    outputs = tf.function(bfloat16)(packed)
    assert bfloat16.transformer_blocks[0].qkv_kernel.dtype == "bfloat16"
    assert all(layer.dtype == tf.float32 for layer in outputs["encoder_outputs"]), "the residual stream is float32"
    difference = np.abs(tf.cast(outputs["pooled_output"], tf.float32) - encoder(packed)["pooled_output"]).max()
    assert 0 < difference < 1e-2, difference


@pytest.mark.parametrize(
    "inputs, signature, message",
    [
        ({"txt": ["a"]}, "serving_default", "missing \\['text'\\]"),
        ({"text": np.array([1, 2], np.int32)}, "serving_default", "must be string"),
        ({"text": [["a"]]}, "serving_default", "rank 1"),
        ({"text": ["a"]}, "nope", None),
        (
            {
                "input_word_ids": np.array([[2, 99, 3]], np.int32),
                "input_mask": np.ones((1, 3), np.int32),
                "input_type_ids": np.zeros((1, 3), np.int32),
            },
            "serve_ids",
            "vocab_size",
        ),
    ],
)
def test_bad_requests_are_invalid_argument(tiny_export, inputs, signature, message):
    _, _, path = tiny_export
    predictor = SessionPredictor(path, replay_warmup=False)
    expected = f"(?s)INVALID_ARGUMENT.*{message}" if message else 'FAILED_PRECONDITION: Serving signature key "nope"'
    with pytest.raises(ServingError, match=expected):  # TF Serving's predict_util.cc codes
        predictor.predict(make_request("tiny", signature, inputs))


@pytest.fixture(scope="module")
def local_server(tiny_export):
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    _, _, path = tiny_export
    server = LocalModelServer(path.parent, name="tiny", grpc_port=0, rest_port=0).start()
    yield server
    server.stop()


def test_grpc_client(tiny_export, local_server):
    encoder, preprocessor, _ = tiny_export
    client = ServingClient("127.0.0.1", model="tiny", grpc_port=local_server.grpc_port, timeout=30)
    out = client.predict(text=["the quick brown foxes jump!"])
    expected = encoder(preprocessor(tf.constant(["the quick brown foxes jump!"])))
    np.testing.assert_allclose(out["pooled_output"], expected["pooled_output"], atol=1e-5)
    with pytest.raises(ServingError, match="INVALID_ARGUMENT.*missing"):
        client.predict(wrong=["x"])
    with pytest.raises(ServingError, match="NOT_FOUND"):
        ServingClient("127.0.0.1", model="other", grpc_port=local_server.grpc_port).predict(text=["a"])


def test_grpc_client_retries_then_names_the_problem():
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = ServingClient("127.0.0.1", grpc_port=port, retries=1, backoff=0.01, timeout=2)
    with pytest.raises(ServingError, match=f"127.0.0.1:{port}.*UNAVAILABLE"):
        client.predict(text=["a"])


@pytest.mark.parametrize("format", ["row", "columnar"])
def test_rest_client(tiny_export, local_server, format):
    encoder, preprocessor, _ = tiny_export
    client = ServingClient("127.0.0.1", model="tiny", rest_port=local_server.rest_port, timeout=30)
    texts = ["the quick brown fox", "中文!"]
    out = client.predict_rest(format=format, text=texts)
    pooled = [row["pooled_output"] for row in out] if format == "row" else out["pooled_output"]
    expected = encoder(preprocessor(tf.constant(texts)))["pooled_output"]
    np.testing.assert_allclose(np.array(pooled), expected, atol=1e-5)
    with pytest.raises(ServingError, match="HTTP 400.*named input"):  # TF Serving's json_tensor.cc texts
        client.predict_rest(format=format, wrong=["x"])


def test_rest_status_and_errors(local_server):
    import urllib.request

    base = f"http://127.0.0.1:{local_server.rest_port}/v1/models/tiny"
    status = json.loads(urllib.request.urlopen(base).read())
    assert status["model_version_status"][0] == {
        "version": "3",
        "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }
    assert local_server.rest("POST", "/v1/models/tiny:predict", b"{not json")[0] == 400
    assert local_server.rest("POST", "/v1/models/tiny:predict", b'{"instances": []}')[0] == 400
    assert local_server.rest("POST", "/v1/models/tiny/versions/9:predict", b'{"instances": ["a"]}')[0] == 404


@pytest.fixture(scope="module")
def base_vocab_preprocessor():
    from conftest import DATA

    tokenizer = BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")), lower_case=True)
    return BertPreprocessor(tokenizer, seq_length=None, max_seq_length=64)


def small_encoder():
    return BertEncoder(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.slow
def test_classifier_export_probabilities_and_labels(tmp_path, base_vocab_preprocessor, monkeypatch):
    """Also: the export traces the model once, its endpoints (`serving_default` on two
    micro-batch slices, `serve_ids`) calling one function."""
    from bert_keras.tasks.classifier import BertClassifier

    model = BertClassifier(small_encoder(), num_classes=3)
    traces, call = [], BertEncoder.call
    monkeypatch.setattr(
        BertEncoder, "call", lambda self, *args, **kwargs: traces.append(1) or call(self, *args, **kwargs)
    )
    texts = ["a gripping, funny film", "dull"], ["it was fine", ""]
    path = export.export_for_serving(
        model, base_vocab_preprocessor, tmp_path, segments=("text_a", "text_b"), labels=["neg", "neutral", "pos"]
    )
    assert len(traces) == 1
    monkeypatch.undo()
    out = SessionPredictor(path).predict_texts(text_a=texts[0], text_b=texts[1])
    logits = model(base_vocab_preprocessor(tuple(tf.constant(t) for t in texts))).numpy()
    np.testing.assert_allclose(out["probabilities"], softmax(logits), atol=1e-5)
    assert out["label_ids"].tolist() == logits.argmax(-1).tolist()
    assert [label.decode() for label in out["labels"]] == [["neg", "neutral", "pos"][i] for i in logits.argmax(-1)]
    assert export.served_labels(path) == ["neg", "neutral", "pos"]


@pytest.mark.slow
def test_tagger_export_tags_words_of_the_original_tokenizer(tmp_path, base_vocab_preprocessor):
    from bert_keras.tasks.token_classifier import BertTokenClassifier

    model = BertTokenClassifier(small_encoder(), num_classes=3)
    text = "John Smith-Jones lives in Zürich."
    path = export.export_for_serving(model, base_vocab_preprocessor, tmp_path, labels=["O", "B-PER", "B-LOC"])
    texts = [text, ""] + VARIED_TEXTS  # enough rows for several length-sorted micro-batches
    out = SessionPredictor(path).predict_texts(text=texts)
    words = ["John", "Smith", "-", "Jones", "lives", "in", "Zürich", "."]
    assert out["num_words"][:2].tolist() == [8, 0]
    assert [w.decode() for w in out["words"][0]] == words + [""] * (out["words"].shape[1] - 8)
    packed = base_vocab_preprocessor(tf.constant(texts))
    logits = model(packed).numpy()
    for row, length in enumerate(packed["input_mask"].numpy().sum(axis=1)):
        pieces = [base_vocab_preprocessor.tokenizer.id_to_token(int(i)) for i in packed["input_word_ids"][row]]
        first_pieces = [p for p in range(1, length - 1) if not pieces[p].startswith("##")]
        probabilities = softmax(logits[row, first_pieces])
        assert out["tag_ids"][row, : len(first_pieces)].tolist() == probabilities.argmax(-1).tolist()
        np.testing.assert_allclose(out["tag_probabilities"][row, : len(first_pieces)], probabilities.max(-1), atol=1e-5)


@pytest.mark.slow
def test_span_export_answer_is_the_best_span_of_the_context(tmp_path, base_vocab_preprocessor):
    from bert_keras.tasks.span_labeler import BertSpanLabeler

    model = BertSpanLabeler(small_encoder())
    question, context = "Where did John go?", "John Smith went home to Zürich after the game."
    path = export.export_for_serving(model, base_vocab_preprocessor, tmp_path, segments=("question", "context"))
    predictor = SessionPredictor(path)
    out = predictor.predict_texts(question=[question], context=[context])
    tokenizer = base_vocab_preprocessor.tokenizer
    packed = base_vocab_preprocessor((tf.constant([question]), tf.constant([context])))
    logits = model(packed)
    start, end = logits["start_logits"].numpy()[0], logits["end_logits"].numpy()[0]
    n_question = len(tokenizer(tf.constant([question]))[0])
    _, starts, ends = tokenizer.tokenize_with_offsets(tf.constant([context]))
    first = n_question + 2
    n_context = len(starts[0])
    best = max(
        (start[s] + end[e], s, e)
        for s in range(first, first + n_context)
        for e in range(s, min(s + 30, first + n_context))
    )
    s_byte, e_byte = int(starts[0][best[1] - first]), int(ends[0][best[2] - first])
    assert out["answer"][0].decode() == context.encode()[s_byte:e_byte].decode()
    assert (out["answer_start_byte"][0], out["answer_end_byte"][0]) == (s_byte, e_byte)
    np.testing.assert_allclose(out["score"][0], best[0], atol=1e-5)
    np.testing.assert_allclose(out["no_answer_score"][0], start[0] + end[0], atol=1e-5)

    # The next best spans: the same decoding, the five best by a brute force over all spans.
    candidates = predictor.predict_texts("span_candidates", question=[question], context=[context])
    spans = sorted(
        (
            (start[s] + end[e], s, e)
            for s in range(first, first + n_context)
            for e in range(s, min(s + 30, first + n_context))
        ),
        reverse=True,
    )[:5]
    byte_spans = [(int(starts[0][s - first]), int(ends[0][e - first])) for _, s, e in spans]
    assert candidates["num_candidates"].tolist() == [5]
    assert list(zip(candidates["start_bytes"][0].tolist(), candidates["end_bytes"][0].tolist())) == byte_spans
    assert [a.decode() for a in candidates["answers"][0]] == [context.encode()[s:e].decode() for s, e in byte_spans]
    np.testing.assert_allclose(candidates["scores"][0], [score for score, _, _ in spans], atol=1e-5)
    assert candidates["answers"][0][0] == out["answer"][0] and candidates["scores"][0][0] == out["score"][0]
    # A one-piece context has one span; the other rows are empty.
    short = predictor.predict_texts("span_candidates", question=[question] * 2, context=["home", ""])
    assert short["num_candidates"].tolist() == [1, 0]
    assert [a.decode() for a in short["answers"][0]] == ["home", "", "", "", ""]
    assert short["scores"][1].tolist() == [-1e9] * 5

    # Many contexts of different lengths: micro-batched, answered in request order.
    questions = [f"where {'is ' * (i % 3)}it?" for i in range(len(VARIED_TEXTS))]
    out = predictor.predict_texts(question=questions, context=VARIED_TEXTS)
    packed = base_vocab_preprocessor((tf.constant(questions), tf.constant(VARIED_TEXTS)))
    logits = model(packed)
    start, end = logits["start_logits"].numpy(), logits["end_logits"].numpy()
    np.testing.assert_allclose(out["no_answer_score"], start[:, 0] + end[:, 0], atol=1e-5)
    for row in range(len(VARIED_TEXTS)):
        context = np.flatnonzero(packed["input_type_ids"][row].numpy())[:-1]  # without the last [SEP]
        best = max(start[row, s] + end[row, e] for s in context for e in context if 0 <= e - s < 30)
        np.testing.assert_allclose(out["score"][row], best, atol=1e-5)


def test_masked_pieces_keep_their_place_in_the_text():
    """`tokenize_masked` (a fill-mask model's reading, and the pieces its `word_pieces`
    answers): each literal [MASK] is the mask piece, at the start, the end or side by
    side, and every piece's byte offsets cut its own text out of the request's."""
    tokenizer = BertTokenizer(SERVING_VOCAB)
    texts = ["[MASK] quick [MASK][MASK] jumps 中文 [MASK]", "no mask , a b", "[MASK]", ""]
    ids, starts, ends = tokenize_masked(tokenizer, tf.constant(texts))
    for row, text in enumerate(texts):
        pieces = [SERVING_VOCAB[i] for i in ids[row].numpy()]
        if "[MASK]" not in text:
            assert ids[row].numpy().tolist() == tokenizer(tf.constant([text]))[0].numpy().tolist()
        assert pieces.count("[MASK]") == text.count("[MASK]")
        read = [text.encode()[start:end].decode() for start, end in zip(starts[row].numpy(), ends[row].numpy())]
        assert len(read) == len(pieces) and read.count("[MASK]") == text.count("[MASK]")
        assert all(cut == piece.removeprefix("##") for cut, piece in zip(read, pieces) if piece != "[UNK]")
    assert [SERVING_VOCAB[i] for i in ids[0].numpy()][:5] == ["[MASK]", "quick", "[MASK]", "[MASK]", "jump"]


@pytest.mark.slow
def test_fill_mask_export_on_reference_pretraining_model(tmp_path, base_vocab_preprocessor):
    from bert_keras.models.pretrainer import BertPretrainer

    model = BertPretrainer.from_checkpoint(require(REFERENCE / "tiny_pretraining_tf1"))
    path = export.export_for_serving(model, base_vocab_preprocessor, tmp_path, top_k=3)
    out = SessionPredictor(path).predict_texts(text=["the [MASK] sat on the [MASK].", "no mask here"])
    assert out["mask_positions"].tolist() == [[2, 6], [-1, -1]]
    tokenizer = base_vocab_preprocessor.tokenizer
    pieces = ["[CLS]", "the", "[MASK]", "sat", "on", "the", "[MASK]", ".", "[SEP]"]
    inputs = {
        "input_word_ids": np.array([[tokenizer.token_to_id(p) for p in pieces]], np.int32),
        "input_mask": np.ones((1, 9), np.int32),
        "input_type_ids": np.zeros((1, 9), np.int32),
        "masked_lm_positions": np.array([[2, 6]], np.int32),
    }
    probabilities = softmax(model(inputs)["mlm_logits"].numpy()[0])
    expected = np.argsort(-probabilities, axis=-1)[:, :3]
    assert out["top_ids"][0].tolist() == expected.tolist()
    assert [[t.decode() for t in row] for row in out["top_tokens"][0]] == [
        [tokenizer.id_to_token(int(i)) for i in row] for row in expected
    ]
    np.testing.assert_allclose(out["top_probabilities"][0], np.sort(probabilities, -1)[:, ::-1][:, :3], atol=1e-5)
    assert (out["top_ids"][1] == -1).all()


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_smoke_script_against_local_server(local_server, protocol, capsys):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "serving"))
    import smoke

    code = smoke.main(
        [
            "--model",
            "tiny",
            "--protocol",
            protocol,
            "--grpc-port",
            str(local_server.grpc_port),
            "--rest-port",
            str(local_server.rest_port),
            "--requests",
            "6",
            "--concurrency",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "6 ok, 0 failed" in out


@pytest.mark.skipif(
    not __import__("shutil").which("tensorflow_model_server"),
    reason="tensorflow_model_server is not on PATH (no package or Docker engine here)",
)
def test_real_tensorflow_model_server(tiny_export, tmp_path):
    import socket
    import time

    encoder, preprocessor, path = tiny_export
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    server = subprocess.Popen(
        [
            "tensorflow_model_server",
            f"--port={ports[0]}",
            f"--rest_api_port={ports[1]}",
            "--model_name=tiny",
            f"--model_base_path={path.parent}",
        ]
    )
    try:
        client = ServingClient("127.0.0.1", "tiny", ports[0], ports[1], retries=10, backoff=0.5)
        expected = encoder(preprocessor(tf.constant(["the quick fox"])))["pooled_output"]
        deadline = time.monotonic() + 60
        while True:
            try:
                out = client.predict(text=["the quick fox"])
                break
            except ServingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        np.testing.assert_allclose(out["pooled_output"], expected, atol=1e-5)
        rows = client.predict_rest(text=["the quick fox"])
        np.testing.assert_allclose(rows[0]["pooled_output"], expected[0], atol=1e-5)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "mixed_bfloat16"])
def test_low_precision_exports_answer_float32(tmp_path, base_vocab_preprocessor, dtype):
    from bert_keras.tasks.classifier import BertClassifier

    model = BertClassifier(small_encoder(), num_classes=2)
    texts = ["a gripping, funny film", "dull and far too long"]
    path = export.export_for_serving(model, base_vocab_preprocessor, tmp_path, compute_dtype=dtype)
    out = SessionPredictor(path).predict_texts(text=texts)
    assert out["probabilities"].dtype == np.float32 and out["logits"].dtype == np.float32
    expected = model(base_vocab_preprocessor(tf.constant(texts))).numpy()
    np.testing.assert_allclose(out["logits"], expected, atol=2e-2)
    assert not np.array_equal(out["logits"], expected), "the export did not compute in low precision"


@pytest.mark.parametrize("shape", [(6, 32), (2, 3, 32)])
def test_fused_layer_norm_matches_layer_normalization(shape):
    """The inference form equals Keras' LayerNormalization, with BERT's epsilon kept at
    1e-12: rows of tiny variance would come out ~3x smaller with batch norm's 1e-5."""
    from bert_keras.layers.layer_norm import FusedLayerNorm

    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * rng.choice([1e-3, 1.0, 30.0], size=shape[:-1] + (1,))).astype("float32")
    fused, plain = FusedLayerNorm(epsilon=1e-12), keras.layers.LayerNormalization(epsilon=1e-12)
    fused.build(shape)
    plain.build(shape)
    weights = [rng.normal(1.0, 0.1, shape[-1]), rng.normal(0.0, 0.1, shape[-1])]
    for layer in (fused, plain):
        layer.set_weights(weights)
    expected = plain(x).numpy()
    np.testing.assert_allclose(tf.function(fused)(x), expected, atol=1e-5)
    np.testing.assert_allclose(fused(x, training=True), expected, atol=1e-5)


def test_fused_layer_norm_becomes_one_onednn_kernel():
    """In a TF1 session (TF Serving's runtime) grappler turns it into `_MklLayerNorm`."""
    from bert_keras.compat import onednn_enabled
    from bert_keras.layers.layer_norm import FusedLayerNorm

    if not onednn_enabled():
        pytest.skip("oneDNN is off (TF_ENABLE_ONEDNN_OPTS=0): no fused layer norm to check")
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 32])
        layer = FusedLayerNorm(epsilon=1e-12)
        y = layer(tf.nn.relu(x))
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
    metadata = tf.compat.v1.RunMetadata()
    session.run(
        y,
        {x: np.ones((4, 32), np.float32)},
        run_metadata=metadata,
        options=tf.compat.v1.RunOptions(output_partition_graphs=True),
    )
    ops = {node.op for partition in metadata.partition_graphs for node in partition.node}
    assert "_MklLayerNorm" in ops and "FusedBatchNormV3" not in ops, sorted(ops)


@pytest.mark.slow
def test_cli_export_compute_dtype(tiny_export, tmp_path):
    """`bert-keras export --compute-dtype bfloat16` serves bfloat16 weights, float32 outputs near fp32."""
    from bert_keras_cli.cli import main

    encoder, _, _ = tiny_export
    encoder.save(tmp_path / "encoder.keras")
    (tmp_path / "vocab.txt").write_text("".join(f"{token}\n" for token in SERVING_VOCAB), encoding="utf-8")
    pooled = {}
    for dtype in ("float32", "bfloat16"):
        argv = [
            "export",
            str(tmp_path / "encoder.keras"),
            "--out",
            str(tmp_path / dtype),
            "--vocab",
            str(tmp_path / "vocab.txt"),
            "--compute-dtype",
            dtype,
        ]
        assert main(argv) == 0
        predictor = SessionPredictor(tmp_path / dtype / "1")
        response = predictor.predict(
            make_request("bert", "serving_default", {"text": ["the quick brown fox jumps", "a b c"]})
        )
        pooled[dtype] = tf.make_ndarray(response.outputs["pooled_output"])
        assert response.outputs["pooled_output"].dtype == tf.float32.as_datatype_enum
        variables = tf.train.load_checkpoint(str(tmp_path / dtype / "1" / "variables" / "variables"))
        stored = {kind.name for name, kind in variables.get_variable_to_dtype_map().items() if "VARIABLE" in name}
        assert ("bfloat16" in stored) == (dtype == "bfloat16"), stored
        predictor.close()
    assert 0 < np.abs(pooled["float32"] - pooled["bfloat16"]).max() < 1e-2


def test_each_weight_is_stored_once(tiny_export):
    """keras-team/keras#23553: tracking the model in ExportArchive stores every weight twice."""
    encoder, _, path = tiny_export
    reader = tf.train.load_checkpoint(str(path / "variables" / "variables"))
    stored = sum(
        int(np.prod(shape))
        for name, shape in reader.get_variable_to_shape_map().items()
        if name.endswith("VARIABLE_VALUE")
    )
    assert stored == encoder.count_params()

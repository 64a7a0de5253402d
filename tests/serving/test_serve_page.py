"""The page of `bert-keras serve` in a real browser: Chromium (the Debian package) driven
by Playwright. For each head kind the page is typed into, and what it draws is read back
from the DOM and compared with the answer of a direct REST call (TF Serving's JSON);
hostile label names and texts stay text; a request over the server's size limit shows
the server's answer and leaves the page working.

One server (all the tiny exports, behind one ModelServerConfig) and one browser per module;
the exports take most of the module's time.
"""

import http.client
import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import SERVING_VOCAB

import bert_keras_cli.serve
from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertPretrainer, BertTokenizer
from bert_keras.serving import export
from bert_keras.serving.batch.records import tagger_record
from bert_keras.serving.serving_tasks import fill_mask_outputs
from bert_keras.tasks.reranker import BertReranker
from bert_keras.tasks.span_labeler import BertSpanLabeler
from bert_keras.tasks.text_embedder import BertTextEmbedder
from bert_keras.tasks.token_classifier import BertTokenClassifier
from bert_keras.tasks.windowing import preprocess_windows
from bert_keras_cli.cli import main as cli

pytestmark = pytest.mark.slow  # eight exports, about 50 s of CPU

CHROMIUM = "/usr/bin/chromium"
HOSTILE_LABEL = "<script>window.pwned=1</script><b>x</b>"
HOSTILE_TEXT = '<img src=x onerror="window.pwned=2"><b>y</b> the quick fox'
MAX_REQUEST_BYTES = 64 << 10
MAX_SEQ_LENGTH = 16  # short, so a sentence of some words is cut
DOC_STRIDE = 4  # the windowed model's
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
MULTI_LABELS = ["sports", "politics", "<i>art</i>", "science"]
CONFIG = BertConfig(
    vocab_size=len(SERVING_VOCAB),
    hidden_size=8,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=MAX_SEQ_LENGTH,
)


def tiny_preprocessor():
    return BertPreprocessor(BertTokenizer(SERVING_VOCAB), seq_length=None, max_seq_length=MAX_SEQ_LENGTH)


def tiny_exports(base):
    """{model name: export base} of one tiny model of each head kind the page draws (the
    regression head reads long texts in windows)."""
    preprocessor = tiny_preprocessor()
    keras.utils.set_random_seed(3)
    models = {
        "classifier": (BertClassifier(BertEncoder(CONFIG), num_classes=3), [HOSTILE_LABEL, "pos", "neg"]),
        "multi-label": (BertClassifier(BertEncoder(CONFIG), num_classes=4, multi_label=True), MULTI_LABELS),
        "regression": (BertClassifier(BertEncoder(CONFIG), num_classes=1, doc_stride=DOC_STRIDE), None),
        "tagger": (BertTokenClassifier(BertEncoder(CONFIG), num_classes=len(TAGS)), TAGS),
        "span": (BertSpanLabeler(BertEncoder(CONFIG)), None),
        "fill-mask": (BertPretrainer(BertEncoder(CONFIG)), None),
        "reranker": (BertReranker(BertEncoder(CONFIG)), None),
        "embedder": (BertTextEmbedder(BertEncoder(CONFIG)), None),
    }
    for name, (model, labels) in models.items():
        export.export_for_serving(model, preprocessor, base / name, labels=labels, warmup_texts=None, model_name=name)
    return {name: base / name for name in models}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return tiny_exports(tmp_path_factory.mktemp("page"))


@pytest.fixture(scope="module")
def server(bases):
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    config = bases["classifier"].parent / "models.config"
    entries = "".join(
        f'config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow" }} ' for name, path in bases.items()
    )
    config.write_text(f"model_config_list {{ {entries}}}")
    server = LocalModelServer(
        model_config_file=config, grpc_port=0, rest_port=0, max_request_bytes=MAX_REQUEST_BYTES
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        message = f"{CHROMIUM} is missing (the Debian package chromium; .ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    # Without the page's Content-Security-Policy: Playwright's waits evaluate strings, and
    # the hostile-string checks must hold on the page's own code, not on the policy.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def rest_predict(server, name, inputs, signature=None):
    """The `outputs` of a columnar REST predict request, as any client gets them."""
    body = {"inputs": inputs, **({"signature_name": signature} if signature else {})}
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    try:
        connection.request("POST", f"/v1/models/{name}:predict", body=json.dumps(body).encode())
        reply = connection.getresponse()
        data = json.loads(reply.read())
        assert reply.status == 200, data
        return data["outputs"]
    finally:
        connection.close()


def open_model(page, server, name):
    page.goto(f"http://127.0.0.1:{server.rest_port}/models/{name}")
    page.wait_for_selector("#form:not([hidden])")


def compute(page, **texts):
    """Types `texts` into the input boxes, clicks Compute and waits for the answer."""
    for input_name, text in texts.items():
        page.fill(f"#input-{input_name}", text)
    page.evaluate("document.getElementById('latency').textContent = ''")
    page.click("#run")
    page.wait_for_function(
        "document.getElementById('latency').textContent || document.getElementById('error').textContent"
    )
    assert page.text_content("#error") == ""
    assert page.text_content("#latency").startswith("latency ")


def screenshot(page, name):
    """The page as a PNG in $PAGE_SCREENSHOTS, when set: for a person to look at."""
    if os.environ.get("PAGE_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["PAGE_SCREENSHOTS"]) / f"{name}.png"), full_page=True)


def shown_rows(container):
    """(name, value) of each bar row in `container` (an element), top to bottom."""
    return [
        (row.query_selector(".name").text_content(), row.query_selector(".value").text_content())
        for row in container.query_selector_all(".row")
    ]


def shown_pieces(page):
    return [
        [span.text_content() for span in row.query_selector_all("span")]
        for row in page.query_selector_all(".row-pieces")
    ]


def test_index_lists_every_served_model(page, server):
    reply = page.goto(f"http://127.0.0.1:{server.rest_port}/")
    assert reply.headers["content-type"] == "text/html; charset=utf-8"
    assert "connect-src 'self'" in reply.headers["content-security-policy"]
    page.wait_for_selector("#models li")
    links = {a.text_content(): a.get_attribute("href") for a in page.query_selector_all("#models a")}
    assert links == {name: f"/models/{name}" for name in server.models}
    page.click("text=span")
    page.wait_for_selector("#input-question")
    assert [box.get_attribute("name") for box in page.query_selector_all("textarea")] == ["question", "context"]


def test_classifier_bars_word_pieces_and_hostile_strings(page, server):
    open_model(page, server, "classifier")
    assert page.input_value("#input-text") != "", "an example is filled in"
    text = "the quick brown fox jumps , a b c the quick brown foxes jump !"
    compute(page, text=text)
    outputs = rest_predict(server, "classifier", {"text": [text]})
    assert_bars(page, [HOSTILE_LABEL, "pos", "neg"], outputs["probabilities"][0])
    # The word pieces the model read, coloured by segment, and what truncation cut.
    pieces = rest_predict(server, "classifier", {"text": [text]}, "word_pieces")
    assert shown_pieces(page) == [[piece for piece in pieces["word_pieces"][0] if piece]]
    assert len(pieces["word_pieces"][0]) == MAX_SEQ_LENGTH and pieces["truncated_pieces"][0][0] > 0
    kept = len(text.encode()[: pieces["kept_bytes"][0][0]].decode())
    assert page.text_content(".truncated .cut") == text[kept:]
    screenshot(page, "classifier")

    # A hostile label and text are shown as text: nothing runs, no element is made of them.
    compute(page, text=HOSTILE_TEXT)
    assert HOSTILE_LABEL in page.text_content("#result")
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.query_selector_all("b, img, script:not(:first-of-type)") == []
    assert page.evaluate("document.scripts.length") == 1
    assert "[UNK]" in [span.text_content() for span in page.query_selector_all(".row-pieces .unk")]


def assert_bars(page, labels, probabilities):
    """The page shows every label with its probability, the best first."""
    expected = sorted(zip(labels, probabilities), key=lambda pair: -pair[1])
    assert shown_rows(page.query_selector("#result")) == [(label, f"{p:.3f}") for label, p in expected]


def test_multi_label_bars(page, server):
    open_model(page, server, "multi-label")
    text = "the quick brown fox jumps"
    compute(page, text=text)
    probabilities = rest_predict(server, "multi-label", {"text": [text]})["probabilities"][0]
    assert sum(probabilities) > 1.0 + 1e-3, "independent sigmoids, not a softmax"
    assert_bars(page, MULTI_LABELS, probabilities)


def test_request_over_the_size_limit_shows_the_servers_answer(page, server):
    open_model(page, server, "classifier")
    page.evaluate("document.getElementById('input-text').value = 'a '.repeat(1 << 19)")  # 1 MB
    page.click("#run")
    page.wait_for_function("document.getElementById('error').textContent")
    error = page.text_content("#error")
    assert error.startswith("HTTP 413: ") and f"limit of {MAX_REQUEST_BYTES} bytes (--max-request-bytes)" in error
    compute(page, text="the fox")  # the page still works
    assert len(shown_rows(page.query_selector("#result"))) == 3


def test_tagger_entities_and_word_tags(page, server):
    open_model(page, server, "tagger")
    text = "the quick brown fox jumps , a b c the fox"
    compute(page, text=text)
    record = tagger_record(rest_predict(server, "tagger", {"text": [text]}), 0, {"text": text}, None, False)
    assert record["entities"], "the tiny tagger must find some entity for this test to mean something"
    marks = page.query_selector_all("mark.entity")
    shown = [
        (mark.query_selector(".entity-text").text_content(), mark.query_selector(".tag").text_content())
        for mark in marks
    ]
    assert shown == [(entity["text"], entity["entity"]) for entity in record["entities"]]
    words = [(span.text_content(), span.get_attribute("title")) for span in page.query_selector_all(".tagged .word")]
    assert words == [(word["word"], f"{word['tag']} {word['score']:.3f}") for word in record["words"]]
    untagged = "(() => { const p = document.querySelector('.tagged').cloneNode(true); "
    untagged += "p.querySelectorAll('.tag').forEach((tag) => tag.remove()); return p.textContent; })()"
    assert page.evaluate(untagged) == text  # the whole text, labels aside
    screenshot(page, "tagger")


def test_span_answer_in_the_context(page, server):
    open_model(page, server, "span")
    question, context = "who jumps ?", "the quick brown fox jumps , a b c 中文 the fox"
    compute(page, question=question, context=context)
    outputs = rest_predict(server, "span", {"question": [question], "context": [context]})
    assert page.text_content(".answer") == outputs["answer"][0]
    assert page.text_content(".answer-in-context") == outputs["answer"][0]
    assert page.text_content(".context") == context
    assert page.text_content(".score") == f"{outputs['score'][0]:.3f}"
    segments = [span.get_attribute("class") for span in page.query_selector_all(".row-pieces span")]
    assert "segment-0" in segments and "segment-1" in segments
    # The next best spans under the answer, as the span_candidates signature answers them.
    candidates = rest_predict(server, "span", {"question": [question], "context": [context]}, "span_candidates")
    assert (candidates["answers"][0][0], candidates["scores"][0][0]) == (outputs["answer"][0], outputs["score"][0])
    assert candidates["num_candidates"] == [5]
    shown = [
        (a.text_content(), s.text_content())
        for a, s in zip(*(page.query_selector_all(c) for c in (".candidate", ".candidate-score")))
    ]
    assert shown == [
        (answer, f"{score:.3f}") for answer, score in zip(candidates["answers"][0][1:], candidates["scores"][0][1:])
    ]
    screenshot(page, "span")


def test_fill_mask_top_words(page, server):
    open_model(page, server, "fill-mask")
    text = "the quick [MASK] fox jumps , a [MASK] c"
    compute(page, text=text)
    outputs = rest_predict(server, "fill-mask", {"text": [text]})
    masks = page.query_selector_all(".mask")
    assert len(masks) == 2
    for index, mask in enumerate(masks):
        tokens, probabilities = outputs["top_tokens"][0][index], outputs["top_probabilities"][0][index]
        assert shown_rows(mask) == [(token, f"{p:.3f}") for token, p in zip(tokens, probabilities)]
    # The pieces the model is run on (fill_mask_outputs' packing, each literal [MASK] the
    # mask piece), read back through the vocabulary: those the signature answers and the page shows.
    packed = {}

    def record(inputs):
        packed.update(inputs)
        return {"mlm_logits": tf.zeros([1, 2, len(SERVING_VOCAB)])}

    fill_mask_outputs(record, tiny_preprocessor(), [tf.constant([text])], top_k=1)
    ids = packed["input_word_ids"][0].numpy()[packed["input_mask"][0].numpy() > 0]
    expected = [SERVING_VOCAB[i] for i in ids]
    pieces = rest_predict(server, "fill-mask", {"text": [text]}, "word_pieces")
    assert [piece for piece in pieces["word_pieces"][0] if piece] == expected
    assert [expected[position] for position in outputs["mask_positions"][0]] == ["[MASK]", "[MASK]"]
    assert pieces["kept_bytes"] == [[len(text.encode())]] and pieces["truncated_pieces"] == [[0]]
    assert shown_pieces(page) == [expected]
    assert [span.text_content() for span in page.query_selector_all(".row-pieces .mask-piece")] == ["[MASK]"] * 2
    assert page.query_selector(".no-pieces") is None and page.query_selector(".truncated") is None
    screenshot(page, "fill-mask")


def test_regression_score_and_the_pieces_of_each_window(page, server):
    open_model(page, server, "regression")
    text = "the quick brown fox jumps , a b c the quick brown fox jumps , a b c"
    compute(page, text=text)
    (score,) = rest_predict(server, "regression", {"text": [text]})  # its one output, `score`
    assert page.text_content("#result .score") == f"{score:.4f}"
    # Each window's pieces, as preprocess_windows packs them for the model.
    windows = preprocess_windows(tiny_preprocessor(), tf.constant([text]), DOC_STRIDE).inputs
    expected = [
        [SERVING_VOCAB[i] for i in ids[mask > 0]]
        for ids, mask in zip(windows["input_word_ids"][0].numpy(), windows["input_mask"][0].numpy())
    ]
    assert len(expected) == 3
    pieces = rest_predict(server, "regression", {"text": [text]}, "word_pieces")
    assert [[piece for piece in window if piece] for window in pieces["word_pieces"][0]] == expected
    assert pieces["kept_bytes"] == [[len(text.encode())]] and pieces["truncated_pieces"] == [[0]]
    assert shown_pieces(page) == expected
    assert page.text_content(".windows").startswith("3 windows: ")
    assert page.query_selector(".truncated") is None, "windows read the whole text"
    screenshot(page, "regression")


def test_reranker_candidates_by_score(page, server):
    open_model(page, server, "reranker")
    query, documents = "the fox", ["a b c", "the quick brown fox", "中文 !", "jumps , the"]
    compute(page, query=query, document="\n".join(documents))
    scores = rest_predict(server, "reranker", {"query": [query] * 4, "document": documents})["scores"]
    assert [name for name, _ in shown_rows(page.query_selector("#result"))] == [
        documents[i] for i in np.argsort(-np.array(scores))
    ]
    screenshot(page, "reranker")


def test_embedder_cosine_of_the_texts(page, server):
    open_model(page, server, "embedder")
    texts = ["the quick brown fox", "a quick brown fox jumps", "中文 , b c"]
    compute(page, text="\n".join(texts))
    embeddings = np.array(rest_predict(server, "embedder", {"text": texts}))
    cosines = embeddings[1:] @ embeddings[0] / (np.linalg.norm(embeddings[1:], axis=1) * np.linalg.norm(embeddings[0]))
    assert shown_rows(page.query_selector("#result")) == [(text, f"{c:.3f}") for text, c in zip(texts[1:], cosines)]
    screenshot(page, "embedder")


def test_serve_command_prints_the_page_address(bases, monkeypatch, capsys):
    """`bert-keras serve` prints where the page is; that address answers it, and the
    model's info tells the page what the export recorded."""
    answers = {}

    def look_then_stop(seconds):
        (address,) = re.findall(r"try them in a browser: (http://\S+/)$", capsys.readouterr().out, re.MULTILINE)
        with urllib.request.urlopen(address + "models/tagger") as reply:
            answers["page"] = reply.headers["Content-Type"], reply.read()
        with urllib.request.urlopen(address + "models/tagger/info") as reply:
            answers["info"] = json.loads(reply.read())
        raise KeyboardInterrupt

    monkeypatch.setattr(bert_keras_cli.serve.time, "sleep", look_then_stop)
    assert cli(["serve", str(bases["tagger"]), "--name", "tagger", "--grpc-port", "0", "--rest-port", "0"]) == 0
    content_type, page = answers["page"]
    assert content_type == "text/html; charset=utf-8" and b'<form id="form"' in page
    assert answers["info"] == {
        "name": "tagger",
        "version": 1,
        "head_kind": "tagger",
        "labels": TAGS,
        "segments": ["text"],
        "word_pieces": "word_pieces",
        "span_candidates": None,
    }


def test_page_with_one_connection(browser, bases):
    """With `--max-connections 1` the page answers twice in a row, and another client is
    answered between: the browser's idle connections do not hold the only slot (60 s)."""
    import time

    from bert_keras.serving.tfserving.local_server import LocalModelServer

    server = LocalModelServer(bases["classifier"], name="classifier", grpc_port=0, rest_port=0, max_connections=1)
    server.start()
    context = browser.new_context(bypass_csp=True)  # as the `page` fixture
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        started = time.monotonic()
        open_model(page, server, "classifier")
        for text in ("the quick fox", "a b c"):
            compute(page, text=text)
            probabilities = rest_predict(server, "classifier", {"text": [text]})["probabilities"][0]
            assert [value for _, value in shown_rows(page.query_selector("#result"))] == [
                f"{p:.3f}" for p in sorted(probabilities, reverse=True)
            ]
        assert time.monotonic() - started < 30
    finally:
        context.close()
        server.stop()

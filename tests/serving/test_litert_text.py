"""The LiteRT text-in export's tokenizer (`litert_text`), run by ai-edge-litert's interpreter,
against the original BERT tokenizer: its ids on the reference files (`../shared/reference`)
and the port in tests/original_tokenizer.py on real multilingual text, on code points of
every kind in context, and on text pairs; cased and uncased."""

import dataclasses
import json

import numpy as np
import pytest
from conftest import DATA, REFERENCE, require
from harness import TINY
from original_tokenizer import original_ids

from bench import real_texts
from bert_keras import BertClassifier, BertEncoder, BertPreprocessor, BertReranker, BertTokenizer
from bert_keras.serving import deploy

MAX_SEQ_LENGTH = 512
# Hard cases by hand: final sigma in and out of context, İ, ligatures, full-width forms,
# Hangul, CJK compatibility ideographs, zero-width joiners, soft hyphen, controls, combining
# marks alone, a word of over 200 characters, typographic punctuation.
HARD_TEXTS = [
    "ΟΔΟΣ. ΑΣ.Β Σ ΑΣ' ΑΣ\u0301 ΑΣ,Β ΑΣ\u00adΒ",
    "İstanbul ǅemal ﬁsh ﬂour ＡＢＣ１２３ ｶﾀｶﾅ",
    "한국어 \uf900\U0002f800 👨\u200d👩\u200d👧 x\u00ady \x00\x7f\x85\u2028tail",
    "\u0301\u0301 a\u0301 \u1fef \u0385 \u212a\u2126",
    "é" * 201 + " short",
    "“quotes” ‘single’ … — – « » ¿¡",
]


def code_point_rows(step):
    """Every `step`-th code point (surrogates excepted) in six contexts, one row each."""
    rows = []
    for code in range(0, 0x110000, step):
        if not 0xD800 <= code <= 0xDFFF:
            char = chr(code)
            rows.append(f"{char} a{char}b ΑΣ{char} Σ{char}Α ά{char}ά {char}{char}")
    return rows


@pytest.fixture(scope="module")
def vocabulary():
    return BertTokenizer(require(DATA / "vocab" / "vocab.txt")).vocabulary


@pytest.fixture(scope="module")
def vocab_index(vocabulary):
    return {token: index for index, token in enumerate(vocabulary)}


def export(tmp_path_factory, vocabulary, lower_case, segments, max_seq_length=MAX_SEQ_LENGTH):
    tokenizer = BertTokenizer(vocabulary, lower_case=lower_case)
    config = dataclasses.replace(TINY, vocab_size=len(vocabulary), max_position_embeddings=max_seq_length)
    model = BertClassifier(BertEncoder(config), num_classes=2, segments=segments)
    path = tmp_path_factory.mktemp("litert") / "model.tflite"
    preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=max_seq_length)
    assert deploy.export_litert(model, preprocessor, path, segments=segments)
    return tokenizer, deploy.predictor("litert", path)


@pytest.fixture(scope="module", params=["uncased", "cased"])
def single(request, tmp_path_factory, vocabulary):
    return export(tmp_path_factory, vocabulary, request.param == "uncased", ("text",))


def tokenize(runtime, **texts):
    packed = runtime.interpreter.get_signature_runner("tokenize")(
        **{name: np.array(rows, dtype=object) for name, rows in texts.items()}
    )
    rows = [ids[mask == 1].tolist() for ids, mask in zip(packed["input_word_ids"], packed["input_mask"])]
    return rows, packed[deploy.EXACTNESS_OUTPUT].astype(bool)


def assert_original(single, texts, vocab_index):
    tokenizer, runtime = single
    rows, exact = tokenize(runtime, text=texts)
    refused = [text for text, answered in zip(texts, exact) if not answered]
    assert not refused, f"{len(refused)} of {len(texts)} refused, e.g. {refused[:3]}"
    for text, row in zip(texts, rows):
        want = original_ids(text, vocab_index, tokenizer.lower_case)[: MAX_SEQ_LENGTH - 2]
        assert row == [tokenizer.cls_id, *want, tokenizer.sep_id], text


@pytest.mark.slow
def test_reference_files_give_the_original_ids(single):
    tokenizer, runtime = single
    name = "uncased" if tokenizer.lower_case else "cased"
    lines = [json.loads(line) for line in require(REFERENCE / f"tokenization_{name}.jsonl").open(encoding="utf-8")]
    rows, exact = tokenize(runtime, text=[line["text"] for line in lines])
    assert exact.all()
    mismatches = [
        line["text"]
        for line, row in zip(lines, rows)
        if row != [tokenizer.cls_id, *line["ids"][: MAX_SEQ_LENGTH - 2], tokenizer.sep_id]
    ]
    assert not mismatches, f"{len(mismatches)} of {len(lines)} differ, e.g. {mismatches[:3]}"


@pytest.mark.slow
def test_real_multilingual_text_and_hard_cases(single, vocab_index):
    require(real_texts.LOCALES / "ja" / "LC_MESSAGES")
    texts = real_texts.chat_lines() + real_texts.program_messages(count=8) + real_texts.typographic_messages(40)
    assert_original(single, texts + HARD_TEXTS, vocab_index)


def test_texts_without_words_and_an_empty_batch(single, vocab_index):
    """Rows (and whole batches) in which nothing is left to tokenize: empty, removed
    characters only, spaces only, a lone combining mark."""
    assert_original(single, ["", "\x00\u200b\ufeff", " \u3000\t", "\u0301"], vocab_index)
    assert_original(single, ["", "\x00\u200b\ufeff", " \u3000\t", "\u0301", "a b"], vocab_index)
    rows, exact = tokenize(single[1], text=[])
    assert rows == [] and exact.tolist() == []


def test_code_points_of_every_kind_in_context(single, vocab_index):
    """Every 97th code point: letters of every script, marks, symbols, unassigned and
    private-use code points (bench/bench_tokenizer.py litert --code-points runs them all)."""
    assert_original(single, code_point_rows(97), vocab_index)


def test_invalid_utf8_is_dropped_as_the_original_drops_it(single, vocab_index):
    tokenizer, runtime = single
    texts = [b"caf\xc3\xa9 \xff\xfe ok", b"\xe2\x80 half \xf0\x9f\x98\x82\xf0\x9f", b"\xed\xa0\x80 surrogate \xc3"]
    rows, exact = tokenize(runtime, text=texts)
    assert exact.all()
    for text, row in zip(texts, rows):
        assert row == [tokenizer.cls_id, *original_ids(text, vocab_index, tokenizer.lower_case), tokenizer.sep_id]


@pytest.fixture(scope="module")
def reranker_export(tmp_path_factory, vocabulary):
    """(model, tokenizer, runtime, whether it takes text, differences from Keras) of a
    cross-encoder on the uncased vocabulary, pairs packed to 48, exported by
    `export_checked` (its self-check runs pairs with accents, CJK, Greek); the uncased
    text-pair file of the pair tokenization test too."""
    tokenizer = BertTokenizer(vocabulary, lower_case=True)
    config = dataclasses.replace(TINY, vocab_size=len(vocabulary), max_position_embeddings=48)
    model = BertReranker(BertEncoder(config))
    path = tmp_path_factory.mktemp("reranker") / "reranker.tflite"
    preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=48)
    text, differences = deploy.export_checked("litert", model, preprocessor, path)
    return model, tokenizer, deploy.predictor("litert", path), text, differences


@pytest.mark.slow
def test_text_pairs_give_the_original_ids_truncated_longest_first(
    tmp_path_factory, vocabulary, vocab_index, reranker_export
):
    """Pairs (a reranker's query and passage), with the original run_classifier's pair
    truncation: pop from the longer segment, ties from the second."""
    model, *uncased, _, _ = reranker_export
    cased = export(tmp_path_factory, vocabulary, False, ("text_a", "text_b"), 48)
    for (tokenizer, runtime), segments in ((uncased, model.segments), (cased, ("text_a", "text_b"))):
        pairs = real_texts.squad_pairs()[:12] + list(zip(real_texts.chat_lines(), HARD_TEXTS * 3))
        rows, exact = tokenize(runtime, **dict(zip(segments, zip(*pairs))))
        assert exact.all()
        for (first, second), row in zip(pairs, rows):
            first, second = (original_ids(text, vocab_index, tokenizer.lower_case) for text in (first, second))
            while len(first) + len(second) > 48 - 3:
                (first if len(first) > len(second) else second).pop()
            assert row == [tokenizer.cls_id, *first, tokenizer.sep_id, *second, tokenizer.sep_id]


def test_marks_nfd_would_reorder_are_refused_alone(single, vocab_index):
    """Two combining marks NFD keeps (spacing, `Mc`), of different classes, in the order
    NFD swaps: per-character rules cannot write the original's uncased text, so that row
    alone is refused. Cased, there is no NFD and every row is answered."""
    tokenizer, runtime = single
    texts = ["fine", deploy.REFUSED_TEXT, "\U0001d165\U0001d16d", "ok \u1715\u1715"]
    rows, exact = tokenize(runtime, text=texts)
    refused = [tokenizer.lower_case and text == deploy.REFUSED_TEXT for text in texts]
    assert exact.tolist() == [not refusal for refusal in refused]
    for text, row, refusal in zip(texts, rows, refused):
        if not refusal:
            assert row == [tokenizer.cls_id, *original_ids(text, vocab_index, tokenizer.lower_case), tokenizer.sep_id]
    if tokenizer.lower_case:
        with pytest.raises(ValueError, match="combining marks"):
            runtime(text=np.array(texts, dtype=object))


@pytest.mark.slow
def test_reranker_takes_query_and_passage_as_text(reranker_export):
    """A cross-encoder's LiteRT file reads (query, passage) text pairs and scores them as
    the Keras model does."""
    model, _, runtime, text, differences = reranker_export
    assert text and 0 <= max(differences.values()) <= deploy.TOLERANCE, differences
    assert runtime.signatures["serving_default"]["inputs"] == sorted(model.segments)
    queries = np.array(["où est la gare ?", "東京"], dtype=object)
    outputs = runtime(**dict(zip(model.segments, [queries, queries[::-1]])))
    assert outputs[deploy.EXACTNESS_OUTPUT].all() and np.isfinite(outputs["scores"]).all()

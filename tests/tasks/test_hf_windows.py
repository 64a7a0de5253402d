"""The windowed `BertTokenClassifier` against Hugging Face transformers on long real texts
(tests/fixtures/windows, written by tests/fixtures/make_window_references.py from a tiny
tagger bert-keras saved as a Hugging Face folder): its windows are the fast tokenizer's
overflowing windows with `stride = max_seq_length - 2 - doc_stride`, each piece gets the
logits PyTorch computes in its max-context window, and `tag` gives the same tags."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertTokenClassifier

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "windows"
REFERENCES = np.load(FIXTURES / "references.npz")
REPORT = json.loads((FIXTURES / "references.json").read_text(encoding="utf-8"))
TEXTS = REPORT["texts"]
SEQ = REPORT["max_seq_length"]
DOC_STRIDES = [int(doc_stride) for doc_stride in REPORT["strides"]]
pytestmark = pytest.mark.filterwarnings("ignore:.*starting them from new initial values")  # no pooler


@functools.cache
def tagger(doc_stride):
    """The folder's tagger, at the length its tokenizer_config.json gives, as transformers."""
    model = BertTokenClassifier.from_checkpoint(FIXTURES / "tagger", seq_length=None, doc_stride=doc_stride)
    assert model.preprocessor.packer.max_seq_length == SEQ
    return model


def test_the_fixture_covers_the_edge_cases():
    """Texts of one window, of exactly one window's pieces, a piece longer, and of many."""
    windows = {name: result["windows"] for name, result in REPORT["strides"][str(DOC_STRIDES[0])]["texts"].items()}
    pieces = {name: result["pieces"] for name, result in REPORT["strides"][str(DOC_STRIDES[0])]["texts"].items()}
    assert pieces["one_window_exactly"] == SEQ - 2 and windows["one_window_exactly"] == 1
    assert pieces["one_piece_over"] == SEQ - 1 and windows["one_piece_over"] == 2
    assert pieces["one_window"] < SEQ - 2 and max(windows.values()) > 10


@pytest.mark.parametrize("doc_stride", DOC_STRIDES + [2 * SEQ])  # past the window: as stride 0
def test_windows_are_the_overflowing_windows_of_transformers_tokenizer(doc_stride):
    reference = str(min(doc_stride, SEQ - 2))
    model = tagger(doc_stride)
    packed, _ = model.word_start_positions(tf.ragged.constant(list(TEXTS.values())))
    ids, mask = packed["input_word_ids"].numpy(), packed["input_mask"].numpy()
    for row, name in enumerate(TEXTS):
        expected_ids = REFERENCES[f"{reference}/{name}/input_ids"]
        expected_mask = REFERENCES[f"{reference}/{name}/attention_mask"]
        ours = [window[m > 0].tolist() for window, m in zip(ids[row], mask[row]) if m.any()]
        theirs = [window[m > 0].tolist() for window, m in zip(expected_ids, expected_mask)]
        assert ours == theirs, name


@pytest.mark.slow
@pytest.mark.parametrize("doc_stride", DOC_STRIDES)
def test_each_piece_gets_the_pytorch_logits_of_its_max_context_window(doc_stride):
    model = tagger(doc_stride)
    logits = model.predict(tf.ragged.constant(list(TEXTS.values())), verbose=0)
    for row, name in enumerate(TEXTS):
        expected = REFERENCES[f"{doc_stride}/{name}/piece_logits"]
        np.testing.assert_allclose(logits[row, 1 : 1 + len(expected)], expected, rtol=0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("doc_stride", DOC_STRIDES)
def test_tag_gives_the_tags_of_the_max_context_logits(doc_stride):
    results = REPORT["strides"][str(doc_stride)]["texts"]
    assert tagger(doc_stride).tag(list(TEXTS.values())) == [results[name]["tags"] for name in TEXTS]

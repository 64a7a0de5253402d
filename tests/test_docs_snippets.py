"""The docs' Python blocks that need their own data to check what they print: each runs as
written (released weights replaced by the tiny original TF1 checkpoint of ../shared/reference, BERT-base
by BERT-Tiny), found by its `<!-- run by: tests/test_docs_snippets.py::TEST -->` marker."""

import json

from doc_blocks import block_run_by
from harness import tiny_encoder, tiny_preprocessor

from bert_keras import BertSpanLabeler


def python_block(test):
    return block_run_by(f"tests/test_docs_snippets.py::{test}").text


def test_squad_post_processing_snippet(tmp_path, monkeypatch, capsys):
    context = "john lives in paris . the quick brown fox did jump over the lazy dog ."
    dataset = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": "1",
                                "question": "who lives in paris ?",
                                "answers": [{"text": "john", "answer_start": 0}],
                            },
                            {
                                "id": "2",
                                "question": "who did jump ?",
                                "answers": [{"text": "the quick brown fox", "answer_start": 22}],
                            },
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "dev-v1.1.json").write_text(json.dumps(dataset), encoding="utf-8")
    (tmp_path / "runs" / "squad").mkdir(parents=True)
    BertSpanLabeler(tiny_encoder(), preprocessor=tiny_preprocessor()).save(tmp_path / "runs" / "squad" / "best.keras")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(python_block("test_squad_post_processing_snippet"), namespace)
    assert set(namespace["predictions"]) == {"1", "2"}
    # Every predicted answer is text of the context (n-best spans map back through byte offsets).
    assert all(answer in context for answer in namespace["predictions"].values())
    printed = capsys.readouterr().out
    assert printed.strip() == str(namespace["evaluate"](namespace["examples"], namespace["predictions"]))


def test_checkpoint_snippet_loads_and_saves(tmp_path, monkeypatch):
    """The load/save snippet, on the tiny original TF1 checkpoint in place of BERT-base."""
    import numpy as np
    from conftest import REFERENCE, require

    from bert_keras.checkpoint import read_checkpoint

    source = require(REFERENCE / "tiny_pretraining_tf1")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(
        python_block("test_checkpoint_snippet_loads_and_saves").replace("uncased_L-12_H-768_A-12/", str(source)),
        namespace,
    )
    original = read_checkpoint(source).weights
    written = read_checkpoint(tmp_path / "bert-base-hf").weights
    assert sorted(written) == sorted(name for name in original if not name.startswith("cls/"))
    for name, value in written.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    # No heads in the HF folder: new ones start on the encoder, whose weights are the checkpoint's.
    encoder_weights = {name: value for name, value in original.items() if not name.startswith("cls/")}
    pretrainer = namespace["pretrainer"]
    loaded = {
        name: value
        for name, value in zip(
            (n for _, names in pretrainer.encoder.original_weight_map() for n in names),
            (
                p
                for variable, names in pretrainer.encoder.original_weight_map()
                for p in np.split(variable.numpy(), len(names), axis=-1)
            ),
        )
    }
    assert loaded.keys() == encoder_weights.keys()
    for name, value in encoder_weights.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def test_tokenizer_snippet_gives_the_original_tokenizers_ids(tmp_path, monkeypatch):
    """The tokenizer snippet on the bert-base-uncased vocab; its ids are checked against the
    original FullTokenizer's recorded output for the same words."""
    import shutil

    from conftest import DATA, require

    shutil.copy(require(DATA / "vocab" / "vocab.txt"), tmp_path / "vocab.txt")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(python_block("test_tokenizer_snippet_gives_the_original_tokenizers_ids"), namespace)
    packed, pair = namespace["packed"], namespace["pair"]
    assert {key: tuple(value.shape) for key, value in packed.items()} == {
        "input_word_ids": (2, 128),
        "input_mask": (2, 128),
        "input_type_ids": (2, 128),
    }
    assert tuple(pair["input_word_ids"].shape) == (2, 64)
    vocab = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    # "where is paris ? paris is in france ." with [CLS]/[SEP], as FullTokenizer splits it.
    expected = ["[CLS]", "where", "is", "paris", "?", "[SEP]", "paris", "is", "in", "france", ".", "[SEP]"]
    row = packed["input_word_ids"][0].numpy()[: int(packed["input_mask"][0].numpy().sum())]
    assert [vocab[i] for i in row] == expected
    assert packed["input_type_ids"][0].numpy()[: len(expected)].tolist() == [0] * 6 + [1] * 6
    starts, ends = namespace["starts"][1].numpy(), namespace["ends"][1].numpy()
    assert [b"Hello, world!"[s:e] for s, e in zip(starts, ends)] == [b"Hello", b",", b"world", b"!"]


def test_encoder_snippet_runs():
    namespace = {}
    exec(python_block("test_encoder_snippet_runs").replace('preset("base")', 'preset("tiny")'), namespace)
    outputs = namespace["outputs"]
    assert tuple(outputs["sequence_output"].shape) == (1, 4, 128)
    assert len(outputs["encoder_outputs"]) == len(outputs["attention_probs"]) == 2
    np_probs = outputs["attention_probs"][0].numpy()
    assert abs(np_probs.sum(-1) - 1).max() < 1e-5  # softmax rows over the 4 tokens

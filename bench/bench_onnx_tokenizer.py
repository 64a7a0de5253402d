"""Could an ONNX export take text? onnxruntime-extensions' `BertTokenizer` op against the
original BERT tokenizer's ids.

The op (domain `ai.onnx.contrib`, onnxruntime-extensions 0.15.2) is run on each text alone
(it reads one text, or one pair, a call) with the vocabulary, lower-casing and accent
stripping of the original's mode. Its ids, less [CLS] and [SEP], are compared with:

* ../shared/reference/tokenization_{uncased,cased}.jsonl: the original tokenizer's ids;
* real text of the kinds apps send (`real_texts.py`, where present): `bert_keras`'s
  `BertTokenizer` ids, which equal the original's on every code point
  (tests/text/test_tokenizer.py).

    python bench/bench_onnx_tokenizer.py [--limit N]

Prints, per kind of text, the rows whose ids differ and a few of them.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
VOCAB = SHARED / "data" / "vocab" / "vocab.txt"


def tokenizer_session(lower_case):
    """An ONNX Runtime session of one `BertTokenizer` node: text [1] -> ids with [CLS]/[SEP]."""
    import onnxruntime
    from onnx import TensorProto, helper
    from onnxruntime_extensions import get_library_path

    node = helper.make_node(
        "BertTokenizer",
        ["text"],
        ["input_ids", "token_type_ids", "attention_mask"],
        domain="ai.onnx.contrib",
        vocab_file=VOCAB.read_text(encoding="utf-8"),
        do_lower_case=int(lower_case),
        strip_accents=int(lower_case),
    )
    outputs = [helper.make_tensor_value_info(name, TensorProto.INT64, [None]) for name in node.output]
    graph = helper.make_graph(
        [node], "tokenizer", [helper.make_tensor_value_info("text", TensorProto.STRING, [None])], outputs
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    )
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def differing(session, texts, want):
    """The texts whose op ids (less [CLS] and [SEP]) differ from `want`."""
    rows = []
    for text, ids in zip(texts, want):
        got = session.run(["input_ids"], {"text": np.array([text], dtype=object)})[0].tolist()
        if got[1:-1] != list(ids):
            rows.append(text)
    return rows


def kinds_of_text(limit):
    """{kind: (texts, lower_case, original ids or None)}: the reference files, then real text."""
    kinds = {}
    for mode in ("uncased", "cased"):
        lines = (SHARED / "reference" / f"tokenization_{mode}.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines][:limit]
        kinds[f"reference, {mode}"] = ([row["text"] for row in rows], mode == "uncased", [row["ids"] for row in rows])
    try:
        import real_texts
    except ImportError:
        print("bench/real_texts.py is not here: reference texts only", file=sys.stderr)
        return kinds
    for name, load in (
        ("SQuAD dev questions", real_texts.squad_questions),
        ("SQuAD dev paragraphs", real_texts.squad_paragraphs),
        ("program messages, en@quot", real_texts.typographic_messages),
        ("program messages, 10 languages", real_texts.program_messages),
        ("chat lines", real_texts.chat_lines),
    ):
        kinds[name] = (load()[:limit], True, None)
    return kinds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, help="at most this many texts of each kind")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import tensorflow as tf

    from bert_keras import BertTokenizer

    sessions = {lower: tokenizer_session(lower) for lower in (True, False)}
    print("| text | rows | ids differ from the original's | examples |\n|---|---|---|---|")
    for kind, (texts, lower_case, want) in kinds_of_text(args.limit).items():
        if want is None:
            want = BertTokenizer(str(VOCAB), lower_case=lower_case)(tf.constant(texts)).to_list()
        bad = differing(sessions[lower_case], texts, want)
        examples = "; ".join(repr(text[:40]) for text in bad[:2])
        print(f"| {kind} | {len(texts)} | {len(bad)} ({100 * len(bad) / len(texts):.1f}%) | {examples} |")


if __name__ == "__main__":
    sys.exit(main())

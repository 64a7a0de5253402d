"""How often the LiteRT text-in export refuses a row, and whether its ids are the original's.

Exports a model (tiny: tokenization does not depend on the weights) with the bert-base
vocabulary to LiteRT, uncased and cased, and runs its `tokenize` signature in ai-edge-litert's
interpreter (tf.text's kernels registered) on real text (bench/real_texts.py):

* refused: rows with `tokenized_exactly` false;
* exact: answered rows whose packed ids equal [CLS] + the original tokenizer's ids + [SEP]
  (truncated to 512), the original being the line-by-line port in tests/original_tokenizer.py;
* pairs: SQuAD questions with their paragraphs as text pairs (the original's longest-first
  truncation), as a reranker or a pair classifier receives them.

Timing, one thread each, in batches of 256 (the tokenizers only, no model): the LiteRT
`tokenize` signature against the in-graph `BertPreprocessor` the SavedModel runs.

`--code-points` also runs every Unicode code point (surrogates excepted) in six contexts
(alone, inside a word, after and before Greek capital sigmas, between accented letters,
doubled) and counts code points whose row is refused or differs.

    nice -n 5 python bench/bench_litert_text.py [--code-points] [--json OUT]

Needs ../shared/data and `pip install 'bert-keras[deploy]'`.
"""

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the original tokenizer's port, the tiny config
sys.path.insert(0, str(ROOT))

from harness import TINY  # noqa: E402
from original_tokenizer import original_ids  # noqa: E402

from bench.measure import Report, add_json_argument, machine_line  # noqa: E402
from bench.real_texts import DATA, by_kind, squad_pairs  # noqa: E402
from bert_keras import BertClassifier, BertEncoder, BertPreprocessor, BertTokenizer  # noqa: E402
from bert_keras.serving import deploy  # noqa: E402

VOCAB = DATA / "vocab" / "vocab.txt"
MAX_SEQ_LENGTH = 512
BATCH = 256


def export(tokenizer, folder, segments):
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocabulary_size, max_position_embeddings=MAX_SEQ_LENGTH)
    encoder = BertEncoder(config)
    model = BertClassifier(encoder, num_classes=2, segments=segments)
    preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=MAX_SEQ_LENGTH)
    path = Path(folder) / f"{'uncased' if tokenizer.lower_case else 'cased'}-{len(segments)}.tflite"
    assert deploy.export_litert(model, preprocessor, path, segments=segments)
    return deploy.predictor("litert", path, threads=1).interpreter.get_signature_runner("tokenize")


def run(tokenize, inputs):
    """{name: texts} -> (packed ids rows, exact flags), in batches."""
    rows, exact = [], []
    count = len(next(iter(inputs.values())))
    for start in range(0, count, BATCH):
        batch = {name: np.array(texts[start : start + BATCH], dtype=object) for name, texts in inputs.items()}
        packed = tokenize(**batch)
        exact += packed[deploy.EXACTNESS_OUTPUT].astype(bool).tolist()
        rows += [ids[mask == 1].tolist() for ids, mask in zip(packed["input_word_ids"], packed["input_mask"])]
    return rows, exact


def truncated_pair(first, second, budget):
    """The original run_classifier's `_truncate_seq_pair`: pop from the longer (ties: the second)."""
    first, second = list(first), list(second)
    while len(first) + len(second) > budget:
        (first if len(first) > len(second) else second).pop()
    return first, second


def graph_seconds(preprocessor, inputs):
    """The peer: the same packing by the in-graph `BertPreprocessor` (what the SavedModel
    runs), in the same batches."""
    pack = tf.function(lambda *texts: preprocessor(list(texts)))
    columns = list(inputs.values())
    pack(*[tf.constant(column[:BATCH]) for column in columns])  # traced outside the timing
    started = time.perf_counter()
    for start in range(0, len(columns[0]), BATCH):
        pack(*[tf.constant(column[start : start + BATCH]) for column in columns])
    return time.perf_counter() - started


def measure(tokenizer, tokenize, texts, index, pairs=False):
    inputs = {"text_a": [a for a, _ in texts], "text_b": [b for _, b in texts]} if pairs else {"text": texts}
    started = time.perf_counter()
    rows, exact = run(tokenize, inputs)
    seconds = time.perf_counter() - started
    preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=MAX_SEQ_LENGTH)
    peer_seconds = graph_seconds(preprocessor, inputs)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    same = 0
    for text, row, answered in zip(texts, rows, exact):
        if pairs:
            first, second = (original_ids(part, index, tokenizer.lower_case) for part in text)
            first, second = truncated_pair(first, second, MAX_SEQ_LENGTH - 3)
            want = [cls, *first, sep, *second, sep]
        else:
            want = [cls, *original_ids(text, index, tokenizer.lower_case)[: MAX_SEQ_LENGTH - 2], sep]
        same += answered and row == want
    answered = sum(exact)
    return {
        "rows": len(texts),
        "refused": len(texts) - answered,
        "refused_percent": 100.0 * (len(texts) - answered) / len(texts),
        "exact_of_answered": same,
        "exact_percent_of_answered": 100.0 * same / max(answered, 1),
        "tokenize_ms_per_row": 1000.0 * seconds / len(texts),
        "in_graph_tokenizer_ms_per_row": 1000.0 * peer_seconds / len(texts),
    }


def context_rows(code):
    char = chr(code)
    return f"{char} a{char}b ΑΣ{char} Σ{char}Α ά{char}ά {char}{char}"


def code_points(tokenizer, tokenize, index):
    """Every code point in context: how many rows are refused and how many differ."""
    codes = [code for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF]
    refused, different = [], []
    for start in range(0, len(codes), 4096):
        chunk = codes[start : start + 4096]
        texts = [context_rows(code) for code in chunk]
        rows, exact = run(tokenize, {"text": texts})
        for code, text, row, answered in zip(chunk, texts, rows, exact):
            if not answered:
                refused.append(code)
            elif row != [tokenizer.cls_id, *original_ids(text, index, tokenizer.lower_case), tokenizer.sep_id]:
                different.append(code)
    return {
        "code_points": len(codes),
        "refused": len(refused),
        "refused_code_points": [f"U+{code:04X}" for code in refused],
        "different": len(different),
        "different_code_points": [f"U+{code:04X}" for code in different[:50]],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code-points", action="store_true", help="also check every Unicode code point")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_litert_text", {**vars(args), "batch": BATCH, "max_seq_length": MAX_SEQ_LENGTH})
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    vocabulary = BertTokenizer(VOCAB).vocabulary
    index = {token: position for position, token in enumerate(vocabulary)}
    texts = by_kind()
    pairs = squad_pairs()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for lower_case in (True, False):
            mode = "uncased" if lower_case else "cased"
            tokenizer = BertTokenizer(vocabulary, lower_case=lower_case)
            tokenize = export(tokenizer, folder, ("text",))
            for kind, rows in texts.items():
                results[f"{mode}: {kind}"] = measure(tokenizer, tokenize, rows, index)
                print(mode, kind, results[f"{mode}: {kind}"], flush=True)
            pair_tokenize = export(tokenizer, folder, ("text_a", "text_b"))
            results[f"{mode}: SQuAD question + paragraph pairs"] = measure(
                tokenizer, pair_tokenize, pairs, index, pairs=True
            )
            print(mode, "pairs", results[f"{mode}: SQuAD question + paragraph pairs"], flush=True)
            if args.code_points:
                results[f"{mode}: every code point"] = code_points(tokenizer, tokenize, index)
                print(mode, "code points", results[f"{mode}: every code point"], flush=True)
    print_table(results, report.machine)
    for name, figures in results.items():
        if "rows" in figures:
            report.add(name, "ms/row", [figures["tokenize_ms_per_row"]], **figures)
        else:
            report.add(name, "code points refused", [figures["refused"]], **figures)
    if args.json:
        report.write(args.json)


def print_table(results, machine):
    print(f"\n{machine_line(machine)}; batches of {BATCH}, one thread each")
    print("| mode: text | rows | refused | ids = original (of answered) | LiteRT tokenize ms/row | in-graph ms/row |")
    print("|---|---|---|---|---|---|")
    for name, figures in results.items():
        if "rows" in figures:
            print(
                f"| {name} | {figures['rows']:,} | {figures['refused']} ({figures['refused_percent']:.2f}%) "
                f"| {figures['exact_of_answered']:,} ({figures['exact_percent_of_answered']:.2f}%) "
                f"| {figures['tokenize_ms_per_row']:.2f} | {figures['in_graph_tokenizer_ms_per_row']:.2f} |"
            )


if __name__ == "__main__":
    sys.exit(main())

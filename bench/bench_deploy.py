"""SavedModel, LiteRT and ONNX Runtime exports side by side on CPU, float32 and quantized.

For an all-MiniLM-L6-v2 SST-2 classifier fine-tuned by the command line (`--sst2-model`:
the `best.keras` of `bert-keras finetune glue --task sst-2 --data-dir ../shared/data/glue/SST-2
--init <all-MiniLM-L6-v2 folder> --max-train-steps 300 --output-dir DIR`, label names and
all) and for BERT-base (random weights from the `base` preset, a 2-class head: latency does
not depend on the weights):

1. Each export is written in its own process (`bert-keras export`'s path, with its
   self-check against Keras), whose peak resident memory is recorded; a process past
   `--max-export-gb` is stopped and reported.
2. One process loads every export (2 intra-op threads each: TensorFlow's
   `tf.config.threading`, LiteRT's `num_threads`, ONNX Runtime's `intra_op_num_threads`,
   with its idle threads' spinning off) and times them INTERLEAVED: each request goes to
   every export in turn (the order rotating), over `--rounds` rounds, so load from other
   jobs on a shared machine falls on all rows alike. Batch 1: one per SST-2 dev sentence
   (`--sentences` of them); batch 32: 4 batches of 32 (padded to the longest, at most 128
   tokens). Each row gets the median and the interquartile range; the int8-to-float32
   SavedModel ratio is taken per request (same sentence, same moment), so its median and
   interquartile range are of paired ratios.
3. The threads that worked: for each export, how many of the process's threads got over
   5% of the wall time of its batch-32 requests (from /proc/self/task/*/stat).
4. Real text refused: the text-in LiteRT file `bert-keras export --format litert` writes is
   run (its `tokenize` signature) on each kind of real text of `real_texts.py`; the share
   of rows it refuses is that of the LiteRT rows. The SavedModel takes text and refuses
   none; the ONNX file and the LiteRT rows timed here take packed ids.

Every export gets the same packed ids (the SavedModel's `serve_ids`, the others' id
inputs); tokenization is outside the timing.

    nice -n 10 python bench/bench_deploy.py --sst2-model DIR/best.keras [--skip-base]

Needs `pip install 'bert-keras[deploy]'` and ../shared/data.

`--peer-onnx FILE` adds the ONNX Runtime peer to the BERT-base rows: Hugging Face's
`BertForSequenceClassification` at BERT-base's size (random weights, 2 labels) exported to
ONNX float32 by PyTorch's exporter, the route the issue's ONNX Runtime figure came from.
`--make-peer-onnx FILE` writes it, run outside the project's environment, in one with torch
and transformers (never a dependency of bert-keras):

    python3 -m venv /work/sidevenv && /work/sidevenv/bin/pip install torch==2.13.0
    /work/sidevenv/bin/pip install transformers onnx onnxscript
    /work/sidevenv/bin/python bench/bench_deploy.py --make-peer-onnx /tmp/peer/bert_base.onnx

`--int8-matmul` instead shows why there is no int8 SavedModel: TensorFlow's own CPU kernels
for an int8 matmul, timed against float32 and bfloat16 at one of BERT-base's matmul shapes
([`--matmul-rows`, 768] x [768, 3072]). A SavedModel (and so TF Serving) can only run
TensorFlow's kernels. Keras' `model.quantize("int8")` makes `Dense`/`EinsumDense` quantize
their inputs per row and run `tf.linalg.matmul(int8, int8, output_type=int32)`
(`BatchMatMulV3`); TensorFlow 1's `QuantizedMatMul` (quint8) is the other int8 kernel
TensorFlow still registers. Each is timed with 2 intra-op threads, interleaved (one call to
each in turn, `--rounds` rounds, 30 by default here), as median and interquartile range.

    nice -n 10 python bench/bench_deploy.py --int8-matmul [--matmul-rows 128] [--rounds 30]
"""

import argparse
import json
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_texts  # noqa: E402
from bench.measure import (  # noqa: E402
    Report,
    Stopwatch,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    interleaved,
    machine_line,
    resident_mb,
    run_peer,
    stop_above,
    summary,
)

DATA = ROOT.parent / "shared" / "data"
THREADS = 2
BATCH = 32
# (format, precision): how each row is exported; the SavedModel has no int8 path (see docs/deploy.md).
VARIANTS = [
    ("savedmodel", "float32"),
    ("savedmodel", "bfloat16"),
    ("litert", "float32"),
    ("litert", "int8"),
    ("onnx", "float32"),
    ("onnx", "int8"),
]
BASELINE = ("savedmodel", "float32")
# Our packed ids -> the peer's (int64) inputs.
PEER_INPUTS = {"input_word_ids": "input_ids", "input_mask": "attention_mask", "input_type_ids": "token_type_ids"}


def load_model(model):
    """(Keras model, preprocessor) of `model`: a .keras path, or "base" (random, seed 0)."""
    import keras

    from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor
    from bert_keras.models.saving import load_keras_file

    if model == "base":
        keras.utils.set_random_seed(0)
        classifier = BertClassifier(BertEncoder(BertConfig.preset("base", vocab_size=30522)), num_classes=2)
        return classifier, base_preprocessor()
    classifier = load_keras_file(model)
    length = min(128, classifier.encoder.config.max_position_embeddings)
    return classifier, BertPreprocessor(classifier.preprocessor.tokenizer, seq_length=None, max_seq_length=length)


def base_preprocessor():
    from bert_keras import BertPreprocessor, BertTokenizer

    tokenizer = BertTokenizer(str(DATA / "vocab" / "vocab.txt"))
    return BertPreprocessor(tokenizer, seq_length=None, max_seq_length=128)


def export_peer(job):
    """Writes one export as `bert-keras export` does (with its self-check), in a process of its own."""
    from bert_keras.serving import deploy
    from bert_keras.serving.export import export_for_serving
    from bert_keras.serving.serving_tasks import trained_inputs

    stop_above(job["max_export_gb"])
    format, precision, path = job["format"], job["precision"], job["path"]
    watch = Stopwatch()
    model, preprocessor = load_model(job["model"])
    _, labels = trained_inputs(model)  # the label names `bert-keras export` serves
    quantize = None if precision == "float32" else precision
    differences = {}
    if format == "savedmodel":
        export_for_serving(model, preprocessor, path, compute_dtype=quantize)
    else:  # as deploy.export_checked, but LiteRT on ids too: every row gets the same packed ids
        if format == "litert":
            deploy.export_litert(model, preprocessor, path, labels, quantize=quantize, text=False)
        else:
            deploy.export_onnx(model, preprocessor, path, labels, quantize=quantize)
        differences = deploy.check_export(format, path, model, preprocessor, labels)
    return {"export_s": watch.seconds, "export_peak_mb": resident_mb(field="VmHWM"), "difference": differences}


def refusals_peer(job):
    """`bert-keras export MODEL --format litert` (text in), then the share of each kind of real
    text its tokenizer refuses: {kind: [refused, rows]}."""
    from bert_keras.serving import deploy
    from bert_keras_cli.cli import main as cli

    if cli(["export", job["model"], "--format", "litert", "--out", job["path"]]) != 0:
        raise SystemExit(f"bert-keras export {job['model']} --format litert failed")
    tokenize = deploy.predictor("litert", job["path"]).interpreter.get_signature_runner("tokenize")
    refused = {}
    for kind, texts in real_texts.by_kind().items():
        batches = (np.array(texts[start : start + 64], dtype=object) for start in range(0, len(texts), 64))
        exact = np.concatenate([tokenize(text=batch)[deploy.EXACTNESS_OUTPUT] for batch in batches])
        refused[kind] = [int(np.sum(~exact.astype(bool))), len(exact)]
    return refused


def refusals(model, folder):
    """{kind: [refused, rows]} of the text-in LiteRT export on real text; None for BERT-base
    (random weights: no model file to export)."""
    if model == "base":
        return None
    return run_peer(
        sys.executable, __file__, {"peer": "refusals", "model": model, "path": str(Path(folder) / "text.tflite")}
    )


def runner(format, path):
    """A function of packed numpy ids -> label ids, running the export with 2 intra-op threads."""
    if format == "savedmodel":
        import tensorflow as tf

        serve_ids = tf.saved_model.load(str(Path(path) / "1")).signatures["serve_ids"]
        return lambda packed: serve_ids(**{name: tf.constant(value) for name, value in packed.items()})[
            "label_ids"
        ].numpy()
    if format == "litert":
        from ai_edge_litert.interpreter import Interpreter

        signature = Interpreter(model_path=str(path), num_threads=THREADS).get_signature_runner("serving_default")
        return lambda packed: signature(**packed)["label_ids"]
    if format == "peer":  # Hugging Face's model exported by PyTorch (make_peer_onnx.py): logits only
        session = ort_session(path)
        return lambda packed: session.run(
            ["logits"], {peer: packed[ours].astype(np.int64) for ours, peer in PEER_INPUTS.items()}
        )[0].argmax(-1)
    session = ort_session(path)
    return lambda packed: session.run(["label_ids"], packed)[0]


def ort_session(path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    # Idle workers would otherwise spin and take the cores from the export timed next.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def thread_cpu_seconds():
    """{thread id: CPU seconds} of this process's threads."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        seconds[task.name] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return seconds


def busy_threads(run, batches):
    """How many threads got over 5% of the wall time while `run` answered `batches`."""
    before = thread_cpu_seconds()
    with Stopwatch() as watch:
        for packed in batches:
            run(packed)
    wall, after = watch.seconds, thread_cpu_seconds()
    return sum(after[thread] - before.get(thread, 0.0) > 0.05 * wall for thread in after)


def measure_peer(job):
    """Loads every export in this process and times them interleaved."""
    with open(job["inputs"], "rb") as file:
        work = pickle.load(file)
    with open(job["paths"], "rb") as file:
        paths = pickle.load(file)
    start_mb = resident_mb()
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops the SavedModel holds)

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    result = {"tensorflow_mb": resident_mb() - start_mb, "rows": {}}
    runs = {}
    for name, path in paths.items():
        before = resident_mb()
        runs[name] = runner(name.split(" ")[0], path)
        for packed in work["batch32"][:1] + work["batch1"][:2]:  # warm-up (graph building, arenas)
            runs[name](packed)
        row = result["rows"][name] = {"added_mb": resident_mb() - before}
        row["busy_threads"] = busy_threads(runs[name], work["batch32"][:1])
    assert tf.config.threading.get_intra_op_parallelism_threads() == THREADS
    for batch, requests in (("batch1", work["batch1"]), ("batch32", work["batch32"])):
        times = interleaved(runs, job["rounds"], inputs=requests, warmup=0)
        baseline = times[" ".join(BASELINE)]
        for name, seconds in times.items():
            result["rows"][name][batch] = {"seconds": seconds, **summary(seconds, scale=1000)}
            result["rows"][name][f"{batch}_ratio"] = summary([a / b for a, b in zip(seconds, baseline)])
    if work["dev"]:
        for name, run in runs.items():
            predictions = np.concatenate([run(packed) for packed in work["dev"]])
            result["rows"][name]["accuracy"] = float(np.mean(predictions == work["labels"]))
    return result


def packed_batches(preprocessor, texts, size):
    import tensorflow as tf

    return [
        {name: value.numpy() for name, value in preprocessor([tf.constant(texts[start : start + size])]).items()}
        for start in range(0, len(texts), size)
    ]


def measure(name, model, texts, labels, folder, with_accuracy, args):
    """Exports every variant of `model` (each in its own process), then times them together."""
    preprocessor = base_preprocessor() if model == "base" else load_model(model)[1]
    work = {
        "batch1": packed_batches(preprocessor, texts[: args.sentences], 1),
        "batch32": packed_batches(preprocessor, texts[: 4 * BATCH], BATCH),
        "dev": packed_batches(preprocessor, texts, BATCH) if with_accuracy and not args.skip_accuracy else [],
        "labels": labels,
    }
    with open(folder / "inputs.pkl", "wb") as file:
        pickle.dump(work, file)
    exports, paths = {}, {}
    for format, precision in args.variants:
        suffix = {"savedmodel": "", "litert": ".tflite", "onnx": ".onnx"}[format]
        path = folder / f"{format}_{precision}{suffix}"
        record = path.with_name(f"{path.name}.json")  # kept with --work-dir: a rerun measures again only
        if not record.exists():
            job = {"peer": "export", "model": model, "format": format, "precision": precision, "path": str(path)}
            try:
                record.write_text(
                    json.dumps(run_peer(sys.executable, __file__, {**job, "max_export_gb": args.max_export_gb}))
                )
            except RuntimeError as error:  # e.g. past --max-export-gb: the row says so, the others go on
                print(f"{name}: {error}", flush=True)
                exports[format, precision] = {"error": str(error).strip().splitlines()[-1]}
                continue
        exports[format, precision] = json.loads(record.read_text())
        paths[f"{format} {precision}"] = path
        print(f"{name}: exported {format} {precision}: {exports[format, precision]}", flush=True)
    refused = refusals(model, folder)
    if refused:
        print(f"{name}: LiteRT text in, rows refused: {json.dumps(refused)}", flush=True)
    variants = list(args.variants)
    if model == "base" and args.peer_onnx:
        variants.append(("peer", "float32"))
        exports["peer", "float32"] = {"export_peak_mb": float("nan")}
        paths["peer float32"] = Path(args.peer_onnx)
    with open(folder / "paths.pkl", "wb") as file:
        pickle.dump(paths, file)
    job = {"peer": "measure", "paths": str(folder / "paths.pkl"), "inputs": str(folder / "inputs.pkl")}
    measured = run_peer(sys.executable, __file__, {**job, "rounds": args.rounds})
    print(f"{name}: measured {json.dumps(measured)}", flush=True)
    rows = []
    for format, precision in variants:
        row = exports[format, precision]
        if "error" not in row:
            path = paths[f"{format} {precision}"]
            row = {**row, **measured["rows"][f"{format} {precision}"], "file_mb": size_mb(path)}
        rows.append((name, format, precision, {**row, "refused": refused_cell(format, refused)}))
    if refused:
        print(f"\n{name}, LiteRT text in (`bert-keras export --format litert`), real text refused:")
        print("| text | rows | refused |\n|---|---|---|")
        for kind, (count, total) in refused.items():
            print(f"| {kind} | {total} | {count} ({100 * count / total:.1f}%) |")
    return rows, measured["tensorflow_mb"]


def refused_cell(format, refused):
    """The refusal column: the share of all real rows the format's text input refuses."""
    if format == "savedmodel":
        return "0 (text in)"
    if format != "litert" or not refused:
        return "ids in"
    count, rows = (sum(values) for values in zip(*refused.values()))
    return f"{100 * count / rows:.1f}% (text in)"


def size_mb(path):
    path = Path(path)
    files = [path] if path.is_file() else [file for file in path.rglob("*") if file.is_file()]
    return sum(file.stat().st_size for file in files) / 1e6


def cell(stats, digits):
    """Median (interquartile range)."""
    q1, q3 = stats["spread"]
    return f"{stats['median']:.{digits}f} ({q1:.{digits}f}-{q3:.{digits}f})"


def print_table(rows, tensorflow_mb, args, report):
    print(f"\n{machine_line(report.machine)}")
    print(
        f"{THREADS} intra-op threads per runtime, all exports in one process, timed interleaved over "
        f"{args.rounds} round(s); batch 1: {args.sentences} SST-2 dev sentences; batch 32: 4 batches "
        "(<= 128 tokens). Times: median (interquartile range) in ms; x SM fp32: the same request's "
        "time over the float32 SavedModel's, median (IQR)."
    )
    print(
        "| model | export | batch 1 (ms) | x SM fp32 | batch 32 (ms) | x SM fp32 | busy threads | file (MB) "
        "| RSS added (MB) | export peak RSS (MB) | SST-2 dev acc | real text refused |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model_name, format, precision, row in rows:
        if "error" in row:
            print(f"| {model_name} | {format} {precision} | export failed: {row['error']} |")
            continue
        accuracy = f"{100 * row['accuracy']:.2f}" if "accuracy" in row else "-"
        print(
            f"| {model_name} | {format} {precision} | {cell(row['batch1'], 1)} | {cell(row['batch1_ratio'], 2)} "
            f"| {cell(row['batch32'], 0)} | {cell(row['batch32_ratio'], 2)} | {row['busy_threads']} "
            f"| {row['file_mb']:.0f} | {row['added_mb']:.0f} | {row['export_peak_mb']:.0f} | {accuracy} "
            f"| {row['refused']} |"
        )
    print(f"TensorFlow itself (import, before any export is loaded): {tensorflow_mb:.0f} MB resident")


def add_to_report(report, rows):
    for model_name, format, precision, row in rows:
        details = {key: value for key, value in row.items() if not key.startswith("batch")}
        if "error" in row:
            report.add(f"{model_name}, {format} {precision}, export", "failed", [float("nan")], **details)
            continue
        for batch in ("batch1", "batch32"):
            name = f"{model_name}, {format} {precision}, {batch}"
            ratio = row[f"{batch}_ratio"]
            report.add(name, "ms", row[batch]["seconds"], scale=1000, ratio_to_baseline=ratio, **details)


# --- --int8-matmul, --make-peer-onnx ---


def int8_matmul_kernels(rows, inner, outer):
    """{name: tf.function} of [rows, inner] x [inner, outer] matmuls."""
    import tensorflow as tf

    generator = np.random.default_rng(0)
    a32 = tf.constant(generator.standard_normal((rows, inner), np.float32))
    b32 = tf.constant(generator.standard_normal((inner, outer), np.float32))
    b8 = tf.constant(generator.integers(-127, 128, (inner, outer), np.int8))
    a16, b16 = tf.cast(a32, tf.bfloat16), tf.cast(b32, tf.bfloat16)
    au = tf.bitcast(tf.constant(generator.integers(0, 256, (rows, inner), np.uint8)), tf.quint8)
    bu = tf.bitcast(tf.constant(generator.integers(0, 256, (inner, outer), np.uint8)), tf.quint8)
    zero, one = tf.constant(0.0), tf.constant(1.0)

    def keras_int8():
        # What Keras' int8 Dense runs on TensorFlow: per-row input scales, int8 x int8 -> int32, rescale.
        scale = 127.0 / tf.reduce_max(tf.abs(a32), axis=-1, keepdims=True)
        quantized = tf.cast(tf.clip_by_value(tf.round(a32 * scale), -127, 127), tf.int8)
        return tf.cast(tf.linalg.matmul(quantized, b8, output_type=tf.int32), tf.float32) / scale

    def quantized_matmul():
        return tf.raw_ops.QuantizedMatMul(a=au, b=bu, min_a=zero, max_a=one, min_b=zero, max_b=one, Toutput=tf.qint32)[
            0
        ]

    return {
        "float32 MatMul": tf.function(lambda: tf.matmul(a32, b32)),
        "bfloat16 MatMul": tf.function(lambda: tf.matmul(a16, b16)),
        "int8 BatchMatMulV3 (Keras int8 Dense)": tf.function(keras_int8),
        "quint8 QuantizedMatMul (TF1)": tf.function(quantized_matmul),
    }


def int8_matmul_table(args, report):
    """TensorFlow's int8 CPU matmul kernels against float32 and bfloat16, interleaved."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    report.settings.update(threads=THREADS, tensorflow=tf.__version__)
    functions = int8_matmul_kernels(args.matmul_rows, 768, 3072)
    times = interleaved({name: lambda f=function: f().numpy() for name, function in functions.items()}, args.rounds)
    stats = {name: report.add(name, "ms", seconds, scale=1000) for name, seconds in times.items()}
    baseline = stats["float32 MatMul"]["median"]
    print(
        f"[{args.matmul_rows}, 768] x [768, 3072], TensorFlow {tf.__version__}, {THREADS} threads, {args.rounds} rounds"
    )
    print(machine_line(report.machine))
    print("| kernel | median ms (IQR) | x float32 |")
    print("|---|---|---|")
    for name, entry in stats.items():
        (q1, q3), median = entry["spread"], entry["median"]
        print(f"| {name} | {median:.1f} ({q1:.1f}-{q3:.1f}) | {median / baseline:.2f} |")


def make_peer_onnx(output):
    """Writes `--peer-onnx`'s file (in an environment with torch and transformers)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, num_labels=2)  # BERT-base: 12 layers, hidden 768
    model = BertForSequenceClassification(config).eval()
    ids = torch.ones(1, 16, dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        output,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    print(f"wrote {output} (transformers {__import__('transformers').__version__}, torch {torch.__version__})")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sst2-model", help="a fine-tuned SST-2 classifier (.keras)")
    parser.add_argument("--skip-base", action="store_true", help="only the MiniLM classifier")
    parser.add_argument("--sentences", type=int, default=50, help="batch-1 sentences timed per round")
    parser.add_argument("--skip-accuracy", action="store_true", help="latency, size and memory only")
    parser.add_argument(
        "--rounds", type=int, help="interleaved rounds over the requests (default 3; 30 with --int8-matmul)"
    )
    parser.add_argument("--max-export-gb", type=float, default=9.5, help="stop an export process past this RSS")
    parser.add_argument(
        "--variants",
        type=lambda text: [tuple(item.split(":")) for item in text.split(",")],
        default=VARIANTS,
        help="FORMAT:PRECISION,... (default: all six; savedmodel:float32, the baseline, must be one)",
    )
    parser.add_argument(
        "--peer-onnx",
        help="BERT-base rows: also time Hugging Face's model exported to ONNX float32 (bench/make_peer_onnx.py)",
    )
    parser.add_argument("--work-dir", help="keep the exports here (default: a temporary folder); reused if there")
    parser.add_argument("--int8-matmul", action="store_true", help="only time TensorFlow's int8 CPU matmul kernels")
    parser.add_argument("--matmul-rows", type=int, default=128, help="tokens in --int8-matmul's batch")
    parser.add_argument("--make-peer-onnx", metavar="FILE", help="only write --peer-onnx's file (needs torch)")
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 30 if args.int8_matmul else 3
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.peer:
        return answer_peer({"export": export_peer, "measure": measure_peer, "refusals": refusals_peer})
    if args.make_peer_onnx:
        return make_peer_onnx(args.make_peer_onnx)
    report = Report("bench_deploy", vars(args))
    if args.int8_matmul:
        int8_matmul_table(args, report)
        if args.json:
            report.write(args.json)
        return 0
    texts, labels = real_texts.sst2("dev")
    labels = np.array(labels)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_deploy_") as scratch:
        scratch = Path(args.work_dir or scratch)
        if args.sst2_model:
            (scratch / "minilm").mkdir(parents=True, exist_ok=True)
            found, tensorflow_mb = measure(
                "MiniLM-L6 SST-2", args.sst2_model, texts, labels, scratch / "minilm", True, args
            )
            rows += found
            if not args.work_dir:
                shutil.rmtree(scratch / "minilm")  # room on disk for BERT-base's exports
        if not args.skip_base:
            (scratch / "base").mkdir(parents=True, exist_ok=True)
            found, tensorflow_mb = measure("BERT-base (random)", "base", texts, labels, scratch / "base", False, args)
            rows += found
    print_table(rows, tensorflow_mb, args, report)
    add_to_report(report, rows)
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

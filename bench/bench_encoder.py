"""BERT encoder forward speed: bert-keras vs keras-hub BertBackbone vs Hugging Face PyTorch.

Random weights, one config (default BERT-base, seq 128). Batch 1 latency and batch 32
throughput, each implementation timed in the same run, interleaved round by round so
that machine noise hits all of them alike; medians; the share of this machine's fp32
matmul peak, measured here too. Peers that are not installed are reported, not fatal:
    pip install keras-hub torch transformers   # benchmark extras only

    python bench/bench_encoder.py [--preset base] [--seq 128] [--rounds 5]
"""

import argparse
import functools
import os
import sys
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
    interleaved_peers,
    machine_line,
    start_timing_peers,
    timed_calls,
    timing_handlers,
)

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


def bert_keras_runner(config, jit_compile):
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


PEERS = {
    "bert-keras": lambda config: bert_keras_runner(config, jit_compile=False),
    "bert-keras (XLA)": lambda config: bert_keras_runner(config, jit_compile=True),
    "keras-hub BertBackbone": keras_hub_runner,
    "HF PyTorch BertModel (eager)": pytorch_runner,
}


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per batch size")
    parser.add_argument("--calls", type=int, default=4, help="timed calls per peer per round at batch 1")
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer(forward_peer(PEERS))

    from bert_keras.config import BertConfig

    report = Report("bench_encoder", vars(args))
    config = BertConfig.preset(args.preset).to_original_dict()
    print(f"BERT-{args.preset} forward")
    forward_table(__file__, args.peers, config, args.seq, args.batch_sizes, args.rounds, args.calls, report)
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

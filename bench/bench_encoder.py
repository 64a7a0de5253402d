"""BERT encoder forward speed: bert-keras vs keras-hub BertBackbone vs Hugging Face PyTorch.

Random weights, one config (default BERT-base, seq 128). Batch 1 latency and batch 32
throughput, each implementation timed in the same run, interleaved round by round so
that machine noise hits all of them alike; medians; the share of this machine's fp32
matmul peak, measured here too. Peers that are not installed are reported, not fatal:
    pip install keras-hub torch transformers   # benchmark extras only

    python bench/bench_encoder.py [--preset base] [--seq 128] [--rounds 5]
"""

import argparse
import multiprocessing
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

# TensorFlow is imported only where used: torch and TF's LLVM cannot share a process,
# so each peer runs in its own spawned worker, and the PyTorch one never loads TF.

SETTLE_SECONDS = 1.0  # idle pause before each peer's turn (see `measure`)


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
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul().numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


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


def worker(name, config, connection):
    """Builds one peer in its own process and times it on request."""
    try:
        run = PEERS[name](config)
    except ImportError as error:
        connection.send(f"not installed ({error.name})")
        return
    connection.send("ready")
    warmed = set()
    while (request := connection.recv()) is not None:
        batch, seq, calls = request
        inputs = make_inputs(config, batch, seq)
        if (batch, seq) not in warmed:  # trace/compile and warm up
            run(inputs)
            run(inputs)
            warmed.add((batch, seq))
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            run(inputs)
            times.append(time.perf_counter() - start)
        connection.send(times)


def start_workers(names, config):
    """One spawned worker per peer; returns {name: connection} of those that started."""
    context = multiprocessing.get_context("spawn")
    workers = {}
    for name in names:
        parent, child = context.Pipe()
        process = context.Process(target=worker, args=(name, config, child), daemon=True)
        process.start()
        child.close()  # so that a worker that dies shows as EOF here, not a hang
        try:
            status = parent.recv()
        except EOFError:
            status = f"worker died (exit code {process.join() or process.exitcode})"
        if status == "ready":
            workers[name] = (parent, process)
        else:
            print(f"  {name}: {status}")
            process.join()
    return workers


def stop_workers(workers):
    for connection, process in workers.values():
        connection.send(None)
        process.join()


def measure(workers, batch, seq, rounds, calls):
    """Interleaved rounds: each peer in turn runs `calls` timed forwards. {name: [seconds]}

    Each turn starts on an idle machine: ONNX Runtime's and OpenMP's worker threads keep
    spinning for a while after a call, which would slow whichever peer runs next.
    """
    times = {name: [] for name in workers}
    for _ in range(rounds):
        for name, (connection, _) in workers.items():
            time.sleep(SETTLE_SECONDS)
            connection.send((batch, seq, calls))
            times[name] += connection.recv()
    return times


def print_table(rows, reference):
    print(
        f"\n{'batch':>5}  {'implementation':34} {'median ms':>10} {'seq/s':>8} "
        f"{'% peak':>7} {'time vs ' + reference:>30}"
    )
    for batch, name, ms, throughput, share, ratio in rows:
        print(f"{batch:>5}  {name:34} {ms:>10.1f} {throughput:>8.1f} {share:>7.1%} {ratio:>29.2f}x")


def main(peers=PEERS, description=__doc__):
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per batch size")
    parser.add_argument("--calls", type=int, default=4, help="timed calls per peer per round at batch 1")
    parser.add_argument("--peers", nargs="+", default=list(peers), choices=list(peers))
    args = parser.parse_args()

    from bert_keras.config import BertConfig

    config = BertConfig.preset(args.preset).to_original_dict()
    peak = matmul_peak_gflops()
    print(
        f"BERT-{args.preset} forward, seq {args.seq}, {os.cpu_count()} cores, "
        f"fp32 matmul peak measured {peak:.0f} GFLOP/s"
    )
    workers = start_workers(args.peers, config)
    rows = []
    for batch in args.batch_sizes:
        times = measure(workers, batch, args.seq, args.rounds, args.calls if batch == 1 else 1)
        flops = forward_flops(config, batch, args.seq)
        reference = statistics.median(times[args.peers[0]])
        for name, samples in times.items():
            median = statistics.median(samples)
            rows.append((batch, name, median * 1e3, batch / median, flops / median / 1e9 / peak, median / reference))
    stop_workers(workers)
    print_table(rows, args.peers[0])


if __name__ == "__main__":
    main()

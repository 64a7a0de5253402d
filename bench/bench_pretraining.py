"""Pre-training throughput: bert-keras BertPretrainer vs keras-hub BertMaskedLM vs HF PyTorch.

Each as shipped (its default compile: both leave `jit_compile` to Keras, whose "auto" is
off on a CPU-only machine) and with XLA. One optimizer step (forward, backward, AdamW
update) at batch 8 x seq 128 with 20 masked predictions, random weights, mini and base.
bert-keras trains MLM + NSP; keras-hub's BertMaskedLM has no NSP head; Hugging Face
BertForPreTraining computes MLM logits at every position (its API). Each peer runs in a
process of its own (torch and TensorFlow cannot share one), interleaved round by round;
medians of sequences/s.

    nice -n 10 python bench/bench_pretraining.py [--presets mini base] [--rounds 5]

keras-hub is not a dependency: run it with a Python that has it (a side venv that sees
this one's packages) for the keras-hub rows.
"""

import argparse
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
    timing_handlers,
)

BATCH, SEQ, PREDICTIONS = 8, 128, 20


def make_batch(vocab_size, seed=0, batch=BATCH, seq=SEQ, predictions=PREDICTIONS):
    rng = np.random.default_rng(seed)
    positions = np.sort(
        np.stack([rng.choice(np.arange(1, seq - 1), predictions, replace=False) for _ in range(batch)]), 1
    )
    return {
        "input_word_ids": rng.integers(1000, vocab_size, (batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "input_type_ids": np.repeat([[0] * (seq // 2) + [1] * (seq // 2)], batch, 0).astype("int32"),
        "masked_lm_positions": positions.astype("int32"),
        "masked_lm_ids": rng.integers(1000, vocab_size, (batch, predictions)).astype("int32"),
        "masked_lm_weights": np.ones((batch, predictions), "float32"),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype("int32"),
    }


def bert_keras_runner(config, jit_compile):
    """`jit_compile` "auto": as `pretrain` compiles by default."""
    from bert_keras import BertConfig, BertEncoder
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training.optimization import create_optimizer

    model = BertPretrainer(BertEncoder(BertConfig(**config)))
    model.compile(optimizer=create_optimizer(1e-4, 10000, 100), jit_compile=jit_compile)
    batch = make_batch(config["vocab_size"])
    return lambda: model.train_on_batch(batch)


def keras_hub_runner(config, **jit_compile):
    """No `jit_compile`: keras-hub's default."""
    import keras
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"],
    )
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
        **jit_compile,
    )
    batch = make_batch(config["vocab_size"])
    x = {
        "token_ids": batch["input_word_ids"],
        "segment_ids": batch["input_type_ids"],
        "padding_mask": batch["input_mask"].astype(bool),
        "mask_positions": batch["masked_lm_positions"],
    }
    return lambda: model.train_on_batch(x, batch["masked_lm_ids"], sample_weight=batch["masked_lm_weights"])


def pytorch_runner(config):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    model = transformers.BertForPreTraining(transformers.BertConfig(**config, layer_norm_eps=1e-12)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    batch = make_batch(config["vocab_size"])
    labels = np.full((BATCH, SEQ), -100, "int64")
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], 1)
    feed = {
        "input_ids": torch.from_numpy(batch["input_word_ids"]).long(),
        "attention_mask": torch.from_numpy(batch["input_mask"]).long(),
        "token_type_ids": torch.from_numpy(batch["input_type_ids"]).long(),
        "labels": torch.from_numpy(labels),
        "next_sentence_label": torch.from_numpy(batch["next_sentence_labels"][:, 0]).long(),
    }

    def step():
        optimizer.zero_grad()
        loss = model(**feed).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


HUB = "keras-hub BertMaskedLM"
PEERS = {
    "bert-keras": lambda config: bert_keras_runner(config, jit_compile="auto"),
    "bert-keras (XLA)": lambda config: bert_keras_runner(config, jit_compile=True),
    HUB: keras_hub_runner,
    f"{HUB} (XLA)": lambda config: keras_hub_runner(config, jit_compile=True),
    "HF PyTorch BertForPreTraining": pytorch_runner,
}


def build_step(job):
    """A peer's training step of one implementation (the same for every "time" job; its
    first 3 calls trace, compile and warm up)."""
    step = PEERS[job["name"]](job["config"])
    return lambda settings: step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["mini", "base"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="timed steps per peer per round")
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer(timing_handlers(build_step))

    from bert_keras.config import BertConfig

    report = Report("bench_pretraining", vars(args))
    print(f"pre-training step, batch {BATCH} x seq {SEQ}, {PREDICTIONS} predictions; {machine_line(report.machine)}")
    rows = []
    for preset in args.presets:
        config = BertConfig.preset(preset).to_original_dict()
        peers = start_timing_peers(__file__, {name: {"name": name, "config": config} for name in args.peers})
        times = interleaved_peers(peers, {"calls": args.calls, "warmup": 3}, args.rounds)
        for peer in peers.values():
            peer.close()
        throughput = {
            name: BATCH / report.add(f"{preset}, {name}", "s/step", samples)["median"]
            for name, samples in times.items()
        }
        for name, value in throughput.items():
            rows.append((preset, name, value, throughput))

    print(f"\n{'preset':6} {'implementation':32} {'seq/s':>8} {'vs keras-hub':>12} {'vs HF':>8}")
    for preset, name, value, throughput in rows:
        hub = throughput.get(HUB)
        hf = throughput.get("HF PyTorch BertForPreTraining")
        print(
            f"{preset:6} {name:32} {value:>8.2f} "
            f"{value / hub if hub else float('nan'):>11.2f}x {value / hf if hf else float('nan'):>7.2f}x"
        )
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

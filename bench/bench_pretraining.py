"""Pre-training: the train step against peers (`peers`), the demo's levers (`demo`,
`evaluate`), and what a mini model learns in a time budget (`mini`).

`peers`: bert-keras BertPretrainer vs keras-hub BertMaskedLM vs HF PyTorch, each as shipped
(its default compile: both leave `jit_compile` to Keras, whose "auto" is off on a CPU-only
machine) and with XLA. One optimizer step (forward, backward, AdamW update) at batch 8 x seq
128 with 20 masked predictions, random weights, mini and base. bert-keras trains MLM + NSP;
keras-hub's BertMaskedLM has no NSP head; Hugging Face BertForPreTraining computes MLM logits
at every position (its API). Each peer runs in a process of its own (torch and TensorFlow
cannot share one), interleaved round by round; medians of sequences/s. keras-hub is not a
dependency: run it with a Python that has it (a side venv that sees this one's packages) for
the keras-hub rows.

    nice -n 10 python bench/bench_pretraining.py peers [--presets mini base] [--rounds 5]

`demo` (issue 44, item 6): train steps of the demo's model (BERT-Tiny, batch 32 x 64 tokens,
10 predictions) against variants that could buy more steps in the same time (batch 64, mixed
bfloat16, dropout off, 16 predictions, the mini size, 32 tokens at batch 64 as a short first
phase would train), interleaved round by round in one process (each round in a new order);
medians of ms/step and the ratio to the demo's step.

`evaluate`: what runs of `bert-keras pretrain` (each RUN/final/pretrainer_tf1) learned, on
the whole held-out tenth of a demo's text (DEMO/corpus/held_out.txt, masked five ways with a
fixed seed: about 31,000 predictions, where the demo's own `--eval-steps 10` sees about
2,900), and the top-5 fill-mask answers to the demo's requests.

    nice -n 10 python bench/bench_pretraining.py demo [--rounds 15]
    nice -n 10 python bench/bench_pretraining.py evaluate DEMO RUN [RUN ...]

`mini`: pre-trains the mini config (L4/H256/A4) on every Gutenberg book but the held-out one
for `--minutes` (dynamic masking, new masks each epoch), then reports masked-LM and
next-sentence accuracy on instances made from the held-out book, against always predicting
the most frequent token / label.

    python bench/bench_pretraining.py mini [--minutes 30] [--held-out chesterton-thursday.txt]
"""

import argparse
import collections
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench.measure import (  # noqa: E402
    Report,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    interleaved,
    interleaved_peers,
    load_average,
    machine_line,
    start_timing_peers,
    step_timer,
    timed,
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


def peers_table(args, report):
    """Sequences/s of each implementation's train step, by preset."""
    from bert_keras.config import BertConfig

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


# --- demo, evaluate: the demo's pre-training ---

DEMO_SEQ, DEMO_PREDICTIONS, DEMO_VOCAB = 64, 10, 4000
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
VARIANTS = {
    "demo (tiny, batch 32)": {},
    "batch 64": {"batch": 64},
    "mixed bfloat16": {"policy": "mixed_bfloat16"},
    "dropout off": {"config": NO_DROPOUT},
    "16 predictions": {"predictions": 16},
    "mini (L4/H256)": {"preset": "mini"},
    "32 tokens, batch 64": {"seq": 32, "batch": 64},
}


def train_step(preset="tiny", batch=32, seq=DEMO_SEQ, predictions=DEMO_PREDICTIONS, policy="float32", config=None):
    """One compiled train step of the demo's recipe (as `pretrain` compiles it on CPU)."""
    import keras

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training.optimization import create_optimizer

    keras.config.set_dtype_policy(policy)
    try:
        shape = BertConfig.preset(preset, vocab_size=DEMO_VOCAB, max_position_embeddings=128, **(config or {}))
        model = BertPretrainer(BertEncoder(shape))
    finally:
        keras.config.set_dtype_policy("float32")
    model.compile(optimizer=create_optimizer(5e-4, 2000, 200), jit_compile=False)
    inputs = make_batch(DEMO_VOCAB, batch=batch, seq=seq, predictions=predictions)
    model.train_on_batch(inputs)  # traced here, not timed
    return lambda: model.train_on_batch(inputs)


def demo_table(rounds, report, steps=4):
    """Each round: `steps` steps of every variant, in a new order."""
    steps_of = {name: train_step(**options) for name, options in VARIANTS.items()}
    runs = {name: lambda step=step: [step() for _ in range(steps)] for name, step in steps_of.items()}
    times = interleaved(runs, rounds, warmup=0, shuffle_seed=0)
    medians = {
        name: report.add(name, "ms/step", values, scale=1000 / steps)["median"] for name, values in times.items()
    }
    demo = medians[next(iter(VARIANTS))]
    for name, median in medians.items():
        print(f"{name:24} {median:7.1f} ms/step  {median / demo:5.2f}x the demo's step")
    print(machine_line({**report.machine, "load_end": load_average()}))


def held_out_records(demo, folder):
    from bert_keras.data.pretraining_shards import Recipe, create_pretraining_data
    from bert_keras.text.tokenizer import BertTokenizer

    records = Path(folder) / "held_out.tfrecord"
    recipe = Recipe(max_seq_length=DEMO_SEQ, max_predictions_per_seq=DEMO_PREDICTIONS, dupe_factor=5, random_seed=777)
    tokenizer = BertTokenizer(str(Path(demo) / "vocab.txt"))
    create_pretraining_data([str(Path(demo) / "corpus" / "held_out.txt")], records, tokenizer, recipe, progress=False)
    return records


def fill_mask(model, vocab, texts):
    import tensorflow as tf

    from bert_keras.serving.serving_tasks import serving_signature
    from bert_keras.text.preprocessor import BertPreprocessor
    from bert_keras.text.tokenizer import BertTokenizer

    signature = serving_signature(model, BertPreprocessor(BertTokenizer(vocab), seq_length=DEMO_SEQ))
    for text in texts:
        answers = signature.from_text([tf.constant([text])], signature.run)
        tokens, probabilities = answers["top_tokens"][0, 0].numpy(), answers["top_probabilities"][0, 0].numpy()
        print(f"    {text} -> " + ", ".join(f"{t.decode()} {p:.2f}" for t, p in zip(tokens, probabilities)))


def evaluate_runs(demo, runs):
    from bert_keras.data import tfrecords
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras_cli.demo import FILL_MASK_REQUESTS

    with tempfile.TemporaryDirectory() as folder:
        records = held_out_records(demo, folder)
        for run in runs:
            model = BertPretrainer.from_checkpoint(str(Path(run) / "final" / "pretrainer_tf1"))
            model.compile(optimizer="adam", jit_compile=False)
            batches = tfrecords.pretraining_dataset([str(records)], 64, DEMO_SEQ, DEMO_PREDICTIONS, 0, repeat=False)
            metrics = model.evaluate(batches, verbose=0, return_dict=True)
            print(run, " ".join(f"{k} {float(v):.4f}" for k, v in sorted(metrics.items()) if "accuracy" in k))
            fill_mask(model, str(Path(demo) / "vocab.txt"), FILL_MASK_REQUESTS)


# --- mini: a time budget's pre-training ---


def held_out_set(book, tokenizer, seq_length):
    """(batches, instances, accuracy of always the most frequent token, rate of random next
    sentences) of the held-out book's instances, made once by the original recipe."""
    import numpy as np
    import tensorflow as tf

    from bert_keras.data.documents import read_documents, tokenize_documents
    from bert_keras.data.instances import InstanceMaker, instance_features
    from bert_keras.data.tfrecords import MODEL_NAMES

    documents = tokenize_documents(read_documents(book), tokenizer)
    maker = InstanceMaker(tokenizer.vocabulary, max_seq_length=seq_length)
    instances = maker.instances(documents, 1, random.Random(0))
    features = [instance_features(i, seq_length, 20) for i in instances]
    held = {
        MODEL_NAMES.get(k, k): np.stack([f[k] for f in features]).astype(
            "float32" if k == "masked_lm_weights" else "int32"
        )
        for k in features[0]
    }
    eval_set = tf.data.Dataset.from_tensor_slices(held).batch(64)
    labels = [t for i in instances for t in i.masked_lm_ids]
    top_token_accuracy = collections.Counter(labels).most_common(1)[0][1] / len(labels)
    nsp_rate = np.mean([i.is_random_next for i in instances])
    return eval_set, instances, top_token_accuracy, nsp_rate


def pretrain(args, train_books, tokenizer):
    """(pretrainer, history, seconds) of the mini model trained for `--minutes`."""
    from bert_keras import BertConfig, BertEncoder
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training.optimization import create_optimizer

    train = dynamic_masking_dataset(train_books, tokenizer, args.batch_size, args.seq_length, seed=0)
    pretrainer = BertPretrainer(BertEncoder(BertConfig.preset("mini")))
    pretrainer.compile(
        optimizer=create_optimizer(args.learning_rate, args.decay_steps, args.warmup_steps),
        jit_compile=args.jit_compile,
    )
    budget = step_timer(budget_seconds=args.minutes * 60)
    history, seconds = timed(
        pretrainer.fit, train, epochs=10**6, steps_per_epoch=100, callbacks=[budget], verbose=2, shuffle=False
    )
    return pretrainer, history, seconds


def mini_table(args, report):
    """Held-out masked-LM and next-sentence accuracy of the mini model after `--minutes`."""
    import keras

    from bert_keras import BertTokenizer

    keras.utils.set_random_seed(0)
    tokenizer = BertTokenizer(args.vocab)
    books = sorted(str(p) for p in Path(args.corpus).glob("*.txt"))
    held_out = [b for b in books if Path(b).name == args.held_out]
    train_books = [b for b in books if b not in held_out]
    if not held_out:
        raise SystemExit(f"{args.held_out} is not in {args.corpus}")

    eval_set, instances, top_token_accuracy, nsp_rate = held_out_set(held_out[0], tokenizer, args.seq_length)
    pretrainer, history, trained = pretrain(args, train_books, tokenizer)
    steps = int(pretrainer.optimizer.iterations.numpy())
    result = pretrainer.evaluate(eval_set, return_dict=True, verbose=0)
    print(
        f"\nmini (L4/H256/A4), {trained / 60:.1f} min, {steps} steps x {args.batch_size} seqs "
        f"({steps * args.batch_size / trained:.1f} seq/s), train loss {history.history['loss'][-1]:.3f}"
    )
    print(
        f"lr {args.learning_rate}, warm-up {args.warmup_steps}, linear decay to 0 at {args.decay_steps}, "
        f"seq {args.seq_length}, jit_compile={args.jit_compile}"
    )
    print(f"held-out {args.held_out}: {len(instances)} instances")
    print(
        f"  masked-LM accuracy      {result['masked_lm_accuracy']:.3f}  (most frequent token: {top_token_accuracy:.3f})"
    )
    print(
        f"  next-sentence accuracy  {result['next_sentence_accuracy']:.3f}  "
        f"(majority label: {max(nsp_rate, 1 - nsp_rate):.3f})"
    )
    print(f"  masked-LM loss {result['masked_lm_loss']:.3f}, next-sentence loss {result['next_sentence_loss']:.3f}")
    print(machine_line({**report.machine, "load_end": load_average()}))
    report.add("masked-LM accuracy, held out", "accuracy", [result["masked_lm_accuracy"]], baseline=top_token_accuracy)
    nsp_baseline = max(nsp_rate, 1 - nsp_rate)
    report.add(
        "next-sentence accuracy, held out", "accuracy", [result["next_sentence_accuracy"]], baseline=nsp_baseline
    )
    report.add("training", "seq/s", [steps * args.batch_size / trained], steps=steps, minutes=trained / 60)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_argument(parser)
    commands = parser.add_subparsers(dest="command")
    peers = commands.add_parser("peers", help="the train step: bert-keras vs keras-hub vs HF PyTorch")
    peers.add_argument("--presets", nargs="+", default=["mini", "base"])
    peers.add_argument("--rounds", type=int, default=5)
    peers.add_argument("--calls", type=int, default=3, help="timed steps per peer per round")
    peers.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    demo = commands.add_parser("demo", help="the demo's pre-training step against its variants")
    demo.add_argument("--rounds", type=int, default=15)
    evaluating = commands.add_parser("evaluate", help="held-out accuracy and fill-mask answers of pretrain runs")
    evaluating.add_argument("demo", help="a `bert-keras demo --output-dir` (its vocab.txt and held-out text)")
    evaluating.add_argument("runs", nargs="+", help="`bert-keras pretrain --output` folders")
    mini = commands.add_parser("mini", help="mini pre-training for a time budget, held-out MLM/NSP accuracy")
    mini.add_argument("--minutes", type=float, default=30)
    mini.add_argument("--corpus", default=str(SHARED / "pretraining" / "gutenberg"))
    mini.add_argument("--vocab", default=str(SHARED / "vocab" / "vocab.txt"))
    mini.add_argument("--held-out", default="chesterton-thursday.txt")
    mini.add_argument("--batch-size", type=int, default=32)
    mini.add_argument("--seq-length", type=int, default=128)
    # A 30-minute budget on 2 cores is ~2,500 steps of 32. At 1e-3 this post-LN model stays on the
    # unigram plateau (predicting "the" everywhere) for the whole budget; 5e-4 leaves it within
    # ~200 steps. The linear decay ends a little after the budget does.
    mini.add_argument("--learning-rate", type=float, default=5e-4)
    mini.add_argument("--warmup-steps", type=int, default=200)
    mini.add_argument("--decay-steps", type=int, default=4000)
    mini.add_argument(
        "--no-jit-compile",
        dest="jit_compile",
        action="store_false",
        help="graph mode instead of XLA (XLA is ~10%% faster on CPU)",
    )
    for command in (peers, demo, mini):
        add_json_argument(command)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer(timing_handlers(build_step))
    if args.command is None:
        parser.error("choose peers, demo, evaluate or mini")
    if args.command == "evaluate":
        return evaluate_runs(args.demo, args.runs)
    report = Report(f"bench_pretraining {args.command}", vars(args))
    if args.command == "peers":
        peers_table(args, report)
    elif args.command == "demo":
        demo_table(args.rounds, report)
    else:
        mini_table(args, report)
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

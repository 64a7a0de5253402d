"""The demo's pre-training levers on this machine (issue 44, item 6).

`throughput`: train steps of the demo's model (BERT-Tiny, batch 32 x 64 tokens, 10
predictions) against variants that could buy more steps in the same time (batch 64,
mixed bfloat16, dropout off, 16 predictions, the mini size, 32 tokens
at batch 64 as a short first phase would train), interleaved round by round
in one process (each round in a new order); medians of ms/step and the ratio to the demo's step.

`evaluate`: what runs of `bert-keras pretrain` (each RUN/final/pretrainer_tf1) learned,
on the whole held-out tenth of a demo's text (DEMO/corpus/held_out.txt, masked five
ways with a fixed seed: about 31,000 predictions, where the demo's own `--eval-steps 10`
sees about 2,900), and the top-5 fill-mask answers to the demo's requests.

    nice -n 10 python bench/bench_demo_pretraining.py throughput [--rounds 15]
    nice -n 10 python bench/bench_demo_pretraining.py evaluate DEMO RUN [RUN ...]
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_pretraining import make_batch
from bench.measure import Report, add_json_argument, interleaved, load_average, machine_line

SEQ, PREDICTIONS, VOCAB = 64, 10, 4000
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


def train_step(preset="tiny", batch=32, seq=SEQ, predictions=PREDICTIONS, policy="float32", config=None):
    """One compiled train step of the demo's recipe (as `pretrain` compiles it on CPU)."""
    import keras

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training.optimization import create_optimizer

    keras.config.set_dtype_policy(policy)
    try:
        shape = BertConfig.preset(preset, vocab_size=VOCAB, max_position_embeddings=128, **(config or {}))
        model = BertPretrainer(BertEncoder(shape))
    finally:
        keras.config.set_dtype_policy("float32")
    model.compile(optimizer=create_optimizer(5e-4, 2000, 200), jit_compile=False)
    inputs = make_batch(VOCAB, batch=batch, seq=seq, predictions=predictions)
    model.train_on_batch(inputs)  # traced here, not timed
    return lambda: model.train_on_batch(inputs)


def throughput(rounds, report, steps=4):
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
    recipe = Recipe(max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, dupe_factor=5, random_seed=777)
    tokenizer = BertTokenizer(str(Path(demo) / "vocab.txt"))
    create_pretraining_data([str(Path(demo) / "corpus" / "held_out.txt")], records, tokenizer, recipe, progress=False)
    return records


def fill_mask(model, vocab, texts):
    import tensorflow as tf

    from bert_keras.serving.serving_tasks import serving_signature
    from bert_keras.text.preprocessor import BertPreprocessor
    from bert_keras.text.tokenizer import BertTokenizer

    signature = serving_signature(model, BertPreprocessor(BertTokenizer(vocab), seq_length=SEQ))
    for text in texts:
        answers = signature.from_text([tf.constant([text])], signature.run)
        tokens, probabilities = answers["top_tokens"][0, 0].numpy(), answers["top_probabilities"][0, 0].numpy()
        print(f"    {text} -> " + ", ".join(f"{t.decode()} {p:.2f}" for t, p in zip(tokens, probabilities)))


def evaluate(demo, runs):
    from bert_keras.data import tfrecords
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras_cli.demo import FILL_MASK_REQUESTS

    with tempfile.TemporaryDirectory() as folder:
        records = held_out_records(demo, folder)
        for run in runs:
            model = BertPretrainer.from_checkpoint(str(Path(run) / "final" / "pretrainer_tf1"))
            model.compile(optimizer="adam", jit_compile=False)
            batches = tfrecords.pretraining_dataset([str(records)], 64, SEQ, PREDICTIONS, 0, repeat=False)
            metrics = model.evaluate(batches, verbose=0, return_dict=True)
            print(run, " ".join(f"{k} {float(v):.4f}" for k, v in sorted(metrics.items()) if "accuracy" in k))
            fill_mask(model, str(Path(demo) / "vocab.txt"), FILL_MASK_REQUESTS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("throughput")
    timing.add_argument("--rounds", type=int, default=15)
    add_json_argument(timing)
    evaluating = commands.add_parser("evaluate")
    evaluating.add_argument("demo", help="a `bert-keras demo --output-dir` (its vocab.txt and held-out text)")
    evaluating.add_argument("runs", nargs="+", help="`bert-keras pretrain --output` folders")
    args = parser.parse_args(argv)
    if args.command == "throughput":
        report = Report("bench_demo_pretraining", vars(args))
        throughput(args.rounds, report)
        if args.json:
            report.write(args.json)
    else:
        evaluate(args.demo, args.runs)


if __name__ == "__main__":
    sys.exit(main())

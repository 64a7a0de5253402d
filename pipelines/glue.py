"""`bert-keras finetune glue`: any GLUE task with a `BertClassifier`.

Readers, official metrics and the submission format are `bert_keras.tasks.glue`; this
command trains, scores each dev set per epoch and writes test submissions.

Example: `bert-keras finetune glue --task sst-2 --data-dir ../shared/data/glue/SST-2
--output-dir runs/sst2`.
"""

import json
from pathlib import Path

from pipelines.arguments import InputPath, add_window_arguments

HELP = "GLUE sentence(-pair) classification and regression"
DEFAULTS = dict(learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    add_window_arguments(parser)
    parser.add_argument("--task", required=True, help="cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte or wnli")
    parser.add_argument(
        "--data-dir", required=True, type=InputPath, help="folder with train.tsv, dev*.tsv (and test*.tsv)"
    )
    parser.add_argument("--predict-test", action="store_true", help="write submission files for test*.tsv")


def run(args):
    from bert_keras.tasks.glue import (
        MNLI_SUBMISSIONS,
        get_task,
        glue_metrics,
        predictions_of,
        read_split,
        write_submission,
    )
    from pipelines.finetune import train_classifier

    task = get_task(args.task)
    data_dir = Path(args.data_dir)
    train_examples = read_split(data_dir / "train.tsv", task).head(args.max_examples)
    dev_sets = {name: read_split(data_dir / name, task).head(args.max_examples) for name in task.dev_files}
    test_sets = {}
    if args.predict_test:
        test_sets = {
            name: read_split(data_dir / name, task, test=True).head(args.max_examples) for name in task.test_files
        }
    print(
        f"{task.name}: {len(train_examples)} training examples, "
        + ", ".join(f"{len(v)} in {k}" for k, v in dev_sets.items())
    )
    regression = task.labels is None
    main_metric = task.metric if len(dev_sets) == 1 else f"matched_{task.metric}"
    model, best = train_classifier(
        args,
        train_examples,
        dev_sets,
        task.labels,
        lambda labels, predicted: glue_metrics(task, labels, predicted),
        main_metric,
    )
    output_dir = Path(args.output_dir)
    for name, examples in test_sets.items():
        predicted = predictions_of(model, examples, args.eval_batch_size, regression)
        target = output_dir / f"{MNLI_SUBMISSIONS.get(name, task.name)}.tsv"
        write_submission(target, task, examples.guids, predicted)
        print(f"wrote {len(examples)} test predictions to {target}")
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    return 0

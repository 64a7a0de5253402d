"""`bert-keras finetune glue`: any GLUE task with a `BertClassifier`.

Readers, official metrics and the submission format are `bert_keras.datasets.glue`; this
command trains, scores each dev set per epoch and writes test submissions.

Example: `bert-keras finetune glue --task sst-2 --data-dir ../shared/data/glue/SST-2
--output-dir runs/sst2`.
"""

from bert_keras_cli.arguments import InputPath, add_window_arguments

HELP = "GLUE sentence(-pair) classification and regression"
DEFAULTS = dict(learning_rate=2e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    add_window_arguments(parser, trained=True)
    parser.add_argument("--task", required=True, help="cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte or wnli")
    parser.add_argument(
        "--data-dir", required=True, type=InputPath, help="folder with train.tsv, dev*.tsv (and test*.tsv)"
    )
    parser.add_argument("--predict-test", action="store_true", help="write submission files for test*.tsv")


def run(args):
    from bert_keras.datasets.glue import get_task, glue_data, read_test_sets, write_submissions
    from bert_keras_cli.finetune.common import train_classifier, write_best_metrics

    task = get_task(args.task)
    data = glue_data(args.data_dir, task, args.max_examples)
    test_sets = read_test_sets(args.data_dir, task, args.max_examples) if args.predict_test else {}
    print(
        f"{task.name}: {len(data.train)} training examples, "
        + ", ".join(f"{len(v)} in {k}" for k, v in data.devs.items())
    )
    model, best = train_classifier(args, data)
    for target, count in write_submissions(model, test_sets, task, args.output_dir, args.eval_batch_size):
        print(f"wrote {count} test predictions to {target}")
    write_best_metrics(args, best)
    return 0

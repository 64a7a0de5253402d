"""`bert-keras finetune glue|squad|conll|tsv|embedder|reranker`: the original fine-tuning recipe through `model.fit`.

Shared here: the common flags, the encoder/preprocessor set-up, and `train`, which runs
a benchmark's `TaskData` (`bert_keras.datasets`) through the library's run,
`bert_keras.recipes.finetune`: the optimiser (AdamW, linear warm-up over 10% of the
steps, then linear decay), evaluation with the task's official metric after every
epoch, the best model kept as `best.keras`, progress bars and TensorBoard logs.
"""

import importlib

from bert_keras_cli.finetune.common import RUN_FILES, add_common_arguments
from bert_keras_cli.finetune.search import add_search_arguments, dimensions, run_search
from bert_keras_cli.setup import resumable_run

TASK_MODULES = ("glue", "squad", "conll", "tsv", "embedder", "reranker")


def register(subparsers):
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune on GLUE, SQuAD, CoNLL-2003, your own TSV, or text pairs for embeddings",
        description=__doc__,
    )
    tasks = parser.add_subparsers(dest="task", required=True)
    for name in TASK_MODULES:
        module = importlib.import_module(f"bert_keras_cli.finetune.{name}")
        task_parser = tasks.add_parser(name, help=module.HELP, description=module.__doc__)
        add_common_arguments(task_parser, **module.DEFAULTS)
        module.add_arguments(task_parser)
        add_search_arguments(task_parser)
        task_parser.set_defaults(func=searched(in_output_dir(module.run)), interim_evaluation=None)


def in_output_dir(run):
    """`run(args)` into an empty `--output-dir`, or one holding the unfinished run of the
    same command, which resumes (`setup.resumable_run`: `--overwrite` removes the
    fine-tuning run there first; GLUE submissions are TASK.tsv)."""

    def run_in_output_dir(args):
        with resumable_run(args, RUN_FILES, "fine-tuning run", run_suffixes=(".tsv",)):
            return run(args)

    return run_in_output_dir


def searched(run_in_output_dir):
    """`run_in_output_dir(args)`, or the search the flags ask for (comma lists, --search,
    --restarts), each trial one such run (`finetune.search`)."""

    def run(args):
        grid = dimensions(args)
        if grid is None:
            return run_in_output_dir(args)
        return run_search(args, grid, run_in_output_dir)

    return run

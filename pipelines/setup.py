"""The set-up the training commands share (`pretrain`, `finetune`, `distill`): the
`--strategy`, `--mixed-precision` and `--seed` flags applied, and a fresh `--output-dir`,
or one that holds the unfinished run of the same command, which then resumes."""

import contextlib
import shutil
from pathlib import Path

# The command line of the run in --output-dir, beside its backups, until the run ends.
COMMAND = Path("checkpoints") / "command.json"
# Flags that do not change what a run computes (`argv`: the command line as typed;
# interim_evaluation: a search's hook, `finetune.search`).
NOT_COMPARED = ("overwrite", "verbose", "func", "argv", "interim_evaluation")
# Arguments that name no file the run reads.
NOT_INPUTS = ("output_dir", "output", "task", "strategy", "tpu", "devices", "optimizer")


def set_up_training(args, batch_size=None):
    """The `--strategy` (checked against the global `batch_size` when given), with
    `--mixed-precision` and `--seed` set. Returns the strategy."""
    import keras

    from bert_keras.training import distribute

    strategy = distribute.resolve_strategy(args.strategy, tpu=args.tpu, devices=args.devices)
    if batch_size is not None:
        distribute.check_global_batch(strategy, batch_size)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(distribute.mixed_precision_policy())
    keras.utils.set_random_seed(args.seed)
    return strategy


def fresh_output_dir(output_dir, overwrite, run_files, what, run_suffixes=()):
    """`output_dir`, empty: a folder holding a run is refused unless `overwrite`, which
    first removes that run's files (`run_files`, and names ending in `run_suffixes`) so
    that a new run leaves no old file beside its model nor adds its curves to the old
    logs; a file no `what` (e.g. "fine-tuning run") writes is never removed."""
    output_dir = Path(output_dir)
    entries = sorted(path.name for path in output_dir.iterdir()) if output_dir.is_dir() else []
    if entries and not overwrite:
        raise FileExistsError(
            f"--output-dir {output_dir} is not empty "
            f"({', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''}); "
            "pass --overwrite to replace the run in it, or choose another folder"
        )
    foreign = [name for name in entries if name not in run_files and not name.endswith(run_suffixes)]
    if foreign:
        raise FileExistsError(
            f"--overwrite: {output_dir} holds files no {what} writes ({', '.join(foreign[:4])}); "
            "not removing them: choose another folder"
        )
    for name in entries:
        path = output_dir / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return output_dir


def resumable_output_dir(args, run_files, what, run_suffixes=()):
    """`--output-dir` for a run that resumes: empty or new (the run starts there, its
    identity recorded: the command line and the content of every file it names), or
    holding the unfinished run of the same command on the same files (it resumes). The
    unfinished run of another command line, or of a model or data file changed since, is
    refused, naming each difference, unless it stopped before its first backup (bad
    input, say: it starts over); `--overwrite` starts over (`fresh_output_dir`).
    `finish_run` ends the record."""
    from bert_keras import run_identity

    output_dir = Path(args.output_dir)
    record = output_dir / COMMAND
    remedy = "run the same command on the same files to resume it, or pass --overwrite to start over"
    recorded = None if args.overwrite else run_identity.read_record(record, remedy)
    identity = command_identity(args)
    if recorded is not None and not run_identity.differences(recorded, identity):
        print(f"--output-dir {output_dir}: resuming the unfinished {what} in it")
        return output_dir
    if recorded is not None and _backed_up(output_dir):
        run_identity.check(recorded, identity, f"--output-dir {output_dir} ({what})", remedy, label=_flag)
    fresh_output_dir(output_dir, args.overwrite or recorded is not None, run_files, what, run_suffixes)
    run_identity.write_record(record, identity)
    return output_dir


def command_identity(args):
    """The run identity of a command: its arguments, and the content of each file or
    folder they name (the starting checkpoint, vocabulary, data), the output folder aside."""
    from bert_keras import run_identity
    from bert_keras_cli.arguments import checkpoint_source

    settings = {name: value for name, value in vars(args).items() if name not in NOT_COMPARED}
    values = dict(settings)
    if values.get("init") == "auto":
        with contextlib.suppress(ValueError):
            values["init"] = checkpoint_source("auto")
    inputs = run_identity.input_paths(values, exclude=NOT_INPUTS)
    outputs = [values[name] for name in ("output_dir", "output") if values.get(name)]
    return run_identity.job_identity(settings, inputs, outputs)


def _flag(name):
    return f"--{name.replace('_', '-')}"


def finish_run(output_dir):
    """The run in `output_dir` is complete: its command record goes (with the backups'
    folder, now empty), so the same command there no longer resumes it."""
    (Path(output_dir) / COMMAND).unlink(missing_ok=True)
    shutil.rmtree(Path(output_dir) / COMMAND.parent, ignore_errors=True)


def _backed_up(output_dir):
    """Whether the run in `output_dir` has made a backup (files beside its command record)."""
    return any(path.name != COMMAND.name for path in (Path(output_dir) / COMMAND.parent).glob("*"))


@contextlib.contextmanager
def resumable_run(args, run_files, what, run_suffixes=()):
    """A `with` block around a run into `resumable_output_dir` that ends with `finish_run`.
    A run that fails before its first backup (bad input) leaves nothing: no record, and
    no `--output-dir` when the block made it."""
    from bert_keras.checkpoint.model_card import RUN_RECORD

    output_dir = Path(args.output_dir)
    existed = output_dir.exists()
    resumable_output_dir(args, {*run_files, RUN_RECORD}, what, run_suffixes)
    try:
        yield output_dir
    except BaseException:
        if not _backed_up(output_dir):
            finish_run(output_dir)
            if not existed and not any(output_dir.iterdir()):
                output_dir.rmdir()
        raise
    finish_run(output_dir)
    write_run_record(args, output_dir)


def write_run_record(args, output_dir):
    """`run.json` in `output_dir`, what the model card of the run's model says of how it
    was made (`checkpoint.model_card.read_run`): the command line and the starting
    checkpoint (`--init`, or a distillation's `--teacher`), with the Hub repo and commit
    it resolved to."""
    import json

    from bert_keras.checkpoint.model_card import RUN_RECORD
    from bert_keras.hub import snapshot_origin
    from bert_keras_cli.arguments import checkpoint_source

    record = {"command": ["bert-keras", *getattr(args, "argv", [args.command])]}
    for name in ("init", "teacher"):
        if getattr(args, name, None):
            path = str(checkpoint_source(getattr(args, name)))
            record[name] = {"path": path, **(snapshot_origin(path) or {})}
    (Path(output_dir) / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")

"""The set-up the training commands share (`pretrain`, `finetune`, `distill`): the
`--strategy`, `--mixed-precision` and `--seed` flags applied, and a fresh `--output-dir`,
or one that holds the unfinished run of the same command, which then resumes."""

import contextlib
import json
import os
import shutil
from pathlib import Path

# The command line of the run in --output-dir, beside its backups, until the run ends.
COMMAND = Path("checkpoints") / "command.json"
# Flags that do not change what a run computes.
NOT_COMPARED = ("overwrite", "verbose", "func")


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
    command line recorded), or holding the unfinished run of the same command (it resumes).
    The unfinished run of another command line is refused, naming the arguments that
    differ, unless it stopped before its first backup (bad input, say: it starts over);
    `--overwrite` starts over (`fresh_output_dir`). `finish_run` ends the record."""
    output_dir = Path(args.output_dir)
    command = json.loads(json.dumps({k: v for k, v in vars(args).items() if k not in NOT_COMPARED}, default=str))
    recorded = None if args.overwrite else _recorded_command(output_dir)
    backed_up = _backed_up(output_dir)
    differ = sorted(
        name for name in (recorded or {}).keys() | command.keys() if (recorded or {}).get(name) != command.get(name)
    )
    if recorded is not None and not args.overwrite and not differ:
        print(f"--output-dir {output_dir}: resuming the unfinished {what} in it")
        return output_dir
    if recorded is not None and not args.overwrite and backed_up:
        raise ValueError(
            f"--output-dir {output_dir} holds an unfinished {what} of another command line ("
            + "; ".join(
                f"--{name.replace('_', '-')} {recorded.get(name)!r} there, {command.get(name)!r} now" for name in differ
            )
            + "): run the same command to resume it, or pass --overwrite to start over"
        )
    fresh_output_dir(output_dir, args.overwrite or recorded is not None, run_files, what, run_suffixes)
    (output_dir / COMMAND).parent.mkdir(parents=True, exist_ok=True)
    written = (output_dir / COMMAND).with_suffix(".json.tmp")  # whole or not at all: a kill leaves none
    written.write_text(json.dumps(command, indent=2) + "\n")
    os.replace(written, output_dir / COMMAND)
    return output_dir


def _recorded_command(output_dir):
    """The command line recorded in `output_dir` (None: none); an unreadable record is an
    error naming it."""
    path = output_dir / COMMAND
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        recorded = None
    if not isinstance(recorded, dict):
        raise ValueError(f"{path}: not a JSON command record (cut short?); pass --overwrite to start over")
    return recorded


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
    output_dir = Path(args.output_dir)
    existed = output_dir.exists()
    resumable_output_dir(args, run_files, what, run_suffixes)
    try:
        yield output_dir
    except BaseException:
        if not _backed_up(output_dir):
            finish_run(output_dir)
            if not existed and not any(output_dir.iterdir()):
                output_dir.rmdir()
        raise
    finish_run(output_dir)

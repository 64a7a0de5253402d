"""The set-up the training commands share (`pretrain`, `finetune`, `distill`): the
`--strategy`, `--mixed-precision` and `--seed` flags applied, and a fresh `--output-dir`."""

import shutil
from pathlib import Path


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

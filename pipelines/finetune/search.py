"""`finetune TASK ... --learning-rate 5e-5,3e-5 --restarts 3`: the search flags, and the
search as `bert_keras.recipes.search` runs it, each trial the same `finetune` command into
`OUTPUT/trials/<trial>/`.

A flag is a grid dimension when its type is `arguments.value_list` (its comma list arrives as
a `ValueList`): --learning-rate, --batch-size, --epochs and --seed, and any flag declared so."""

import argparse
from pathlib import Path

from bert_keras_cli.arguments import ValueList

# The flags of a search; a trial's command line is the search's without them.
SEARCH_FLAGS = (
    "search",
    "restarts",
    "dry_run",
    "study",
    "keep_models",
    "discard_after",
    "discard_keep",
    "grace_period",
)
PRESETS = ("devlin", "devlin-glue")  # recipes.search_report.PRESETS: parsing imports no TensorFlow


def add_search_arguments(parser):
    group = parser.add_argument_group(
        "search", "a comma list in --learning-rate, --batch-size, --epochs or --seed makes a search over their product"
    )
    group.add_argument(
        "--search",
        choices=PRESETS,
        help="the paper's grid: devlin (App. A.3: batch 16,32; lr 5e-5,3e-5,2e-5; epochs 2,3,4) or "
        "devlin-glue (Sec. 4.1: batch 32, 3 epochs, lr 5e-5,4e-5,3e-5,2e-5)",
    )
    group.add_argument("--restarts", type=int, help="run each configuration with N seeds: --seed, --seed + 1, ...")
    group.add_argument("--dry-run", action="store_true", help="list the search's trials and exit")
    group.add_argument(
        "--study",
        help="Optuna storage the workers share: an RDB URL (sqlite:///search.db, postgresql://...) or a journal "
        "file on a shared filesystem (default: OUTPUT/study.journal)",
    )
    group.add_argument("--keep-models", action="store_true", help="keep every trial's best.keras, not only the best's")
    group.add_argument(
        "--discard-after",
        type=float,
        metavar="F",
        help="evaluate each trial after fraction F of its steps and stop it there when outside the best share "
        "--discard-keep of the trials evaluated there, itself included (once 2 others have got there; ties in the "
        "dev metric go to the lower dev loss; Dodge et al. 2020)",
    )
    group.add_argument(
        "--discard-keep",
        type=float,
        metavar="K",
        help="with --discard-after, the share of the trials at that point kept running (default 0.5: those not "
        "below the median); a trial stops when at least a share K of them is better than it",
    )
    group.add_argument(
        "--grace-period",
        type=float,
        default=300,
        help="seconds without a heartbeat after which a running trial's worker is taken for dead and its "
        "trial resumed by another (default 300)",
    )


def dimensions(args):
    """The grid the flags ask for (name -> values), the comma lists and --search's; None: no search."""
    listed = {name: list(value) for name, value in vars(args).items() if isinstance(value, ValueList)}
    for name, values in listed.items():
        setattr(args, name, values[0])
    grid = {name: values for name, values in listed.items() if len(values) > 1}
    if args.search:
        from bert_keras.recipes.search_report import PRESETS as GRIDS

        both = sorted(set(GRIDS[args.search]) & set(listed))
        if both:
            raise ValueError(f"--search {args.search} sets {', '.join(_flag(name) for name in both)}: give one")
        grid = {**grid, **GRIDS[args.search]}
    if grid or args.restarts is not None:
        return grid
    for name in ("dry_run", "study", "keep_models", "discard_after", "discard_keep"):
        if getattr(args, name) not in (None, False):
            raise ValueError(f"{_flag(name)} is for a search: give a comma list, --search or --restarts")
    return None


def _flag(name):
    return f"--{name.replace('_', '-')}"


def _discard_keep(args, searching):
    """--discard-keep, its default where not given, once both discard flags are checked."""
    if args.discard_keep is not None and args.discard_after is None:
        raise ValueError("--discard-keep is the share --discard-after keeps: give --discard-after too")
    keep = searching.DISCARD_KEEP if args.discard_keep is None else args.discard_keep
    searching.check_discard(args.discard_after, keep)
    return keep


def run_search(args, grid, run_in_output_dir):
    """The search of `grid` (from `dimensions`) in --output-dir: each trial `run_in_output_dir`
    of the command's own arguments with the trial's settings, into `trials/<trial>/`."""
    from bert_keras.recipes.search_report import format_summary, trial_name
    from bert_keras_cli.setup import command_identity

    try:
        from bert_keras.recipes import search as searching
    except ModuleNotFoundError as error:
        if error.name != "optuna":
            raise
        raise ValueError("a search needs Optuna: pip install 'bert-keras[search]'") from None
    trials = searching.grid(grid, args.restarts, args.seed)
    if args.overwrite:
        raise ValueError("--overwrite does not start a search over: remove its --output-dir (and --study) instead")
    keep = _discard_keep(args, searching)
    if args.dry_run:
        for params in trials:
            print(trial_name(params), " ".join(f"{_flag(k)} {v}" for k, v in params.items()))
        print(f"{len(trials)} trials")
        return 0
    base = {name: value for name, value in vars(args).items() if name not in SEARCH_FLAGS}
    shared = argparse.Namespace(**{**base, **{name: None for name in trials[0]}})
    identity = command_identity(shared)
    del identity["settings"]["output_dir"]  # the workers of one study may write to their own folders
    identity["settings"]["discard_after"] = args.discard_after
    identity["settings"]["discard_keep"] = None if args.discard_after is None else keep

    def run_trial(params, trial_dir, interim):
        trial = argparse.Namespace(**{**base, **params, "output_dir": str(trial_dir), "interim_evaluation": interim})
        run_in_output_dir(trial)

    output_dir = Path(args.output_dir)
    records = searching.search(
        trials,
        run_trial,
        output_dir,
        study=args.study,
        identity=identity,
        discard_after=args.discard_after,
        discard_keep=keep,
        keep_models=args.keep_models,
        grace_period=args.grace_period,
    )
    print(format_summary(records))
    if (output_dir / "best.keras").exists():
        print(f"best model in {output_dir / 'best.keras'}; every trial in {output_dir / 'search.jsonl'}")
    return 0

"""`bert-keras plot RUN_DIR`: the training curves of a run as one PNG, from its TensorBoard logs.

RUN_DIR is the `--output` of `bert-keras pretrain` (logs/phase1, logs/phase2) or the
`--output-dir` of `bert-keras finetune` (logs/). One panel per metric, train and
validation together, phases one after the other on a single step axis; for a fine-tuning
run that wrote per-class scores (`evaluations/`), the best epoch's confusion matrix (a
classifier's) and per-class precision, recall and F1 as two more panels. TensorBoard
stays the live view; this is the picture to keep next to the checkpoints.
"""

import collections
import dataclasses
import json
import math
from pathlib import Path

from bert_keras_cli.arguments import InputPath


class RunFolder(InputPath):
    """RUN_DIR, checked before TensorFlow loads."""

    message = "no run folder {path}"


PANEL_INCHES = (4.5, 3.2)  # width, height of one metric's panel
COLUMNS = 3
DPI = 100


def register(subparsers):
    parser = subparsers.add_parser(
        "plot", help="write a PNG of loss and metrics per step from a run's logs", description=__doc__
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=RunFolder, help="output folder of pretrain or finetune")
    parser.add_argument("--output", help="PNG path (default: RUN_DIR/training_curves.png)")
    parser.set_defaults(func=run)


@dataclasses.dataclass
class Curves:
    """What a run logged, phases one after the other on one axis.

    `series[metric][(split, kind)]` is a list of (x, value): split "train" or
    "validation"; kind "step" (Keras's batch-level summaries: the running mean since
    the epoch began) or "epoch" (the epoch's value, at its last step). `phases` lists
    (name, x before its first point, its last x, unit): the unit is "step", or "epoch"
    for a phase that logged epoch-level summaries only."""

    series: dict
    phases: list

    @property
    def x_label(self):
        units = {unit for *_, unit in self.phases}
        if len(units) == 1:
            return units.pop()
        return "step; epoch in " + ", ".join(name for name, *_, unit in self.phases if unit == "epoch")


def read_curves(run_dir):
    """`Curves` from the TensorBoard event files under `run_dir` (or `run_dir/logs`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run folder {run_dir}")
    root = run_dir / "logs" if (run_dir / "logs").is_dir() else run_dir
    files = sorted(root.rglob("events.out.tfevents.*"))
    if not files:
        raise FileNotFoundError(f"no TensorBoard logs (events.out.tfevents.*) under {run_dir}")
    phases = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in files:
        folder = path.parent
        is_split = folder != root and folder.name in ("train", "validation")
        split, phase_dir = (folder.name, folder.parent) if is_split else ("train", folder)
        name = phase_dir.relative_to(root).as_posix()
        phases["" if name == "." else name][split].append(path)
    read = [(name, *_read_phase(splits)) for name, splits in phases.items()]
    series = collections.defaultdict(dict)
    spans, offset = [], 0
    for name, points, _ in sorted(read, key=lambda phase: phase[2]):  # in the order they ran
        if not points:
            continue
        last = offset
        for (split, kind, metric), values in points.items():
            shifted = [(offset + x, value) for x, value in sorted(values.items())]
            series[metric].setdefault((split, kind), []).extend(shifted)
            last = max(last, shifted[-1][0])
        unit = "step" if any(kind == "step" for _, kind, _ in points) else "epoch"
        spans.append((name, offset, last, unit))
        offset = last
    if not series:
        raise ValueError(f"the TensorBoard logs under {run_dir} hold no scalar summaries")
    return Curves(dict(series), spans)


def _read_phase(splits):
    """({(split, kind, metric): {step: value}}, first wall time) of one phase's
    train/validation event files.

    Keras's TensorBoard callback numbers batch summaries from 1 in every `fit` call, so
    a resumed run (BackupAndRestore) starts a new event file at step 1 again: such a file
    is shifted to the end of the epoch it resumes after, and its steps replace those of
    the interrupted attempt. Epoch summaries (numbered by epoch) go to the step of the
    last batch summary before them, which is the epoch's last step when the logging
    interval divides the epoch length; without batch summaries, to epoch number + 1."""
    points = collections.defaultdict(dict)
    epoch_values = collections.defaultdict(dict)
    epoch_end, first_wall_time = {}, math.inf
    for split in ("train", "validation"):
        files = [events for events in map(_scalars, splits.get(split, ())) if events]
        for events in sorted(files, key=lambda events: events[0][0]):
            first_wall_time = min(first_wall_time, events[0][0])
            epochs = [step for _, tag, step, _ in events if tag.startswith("epoch_")]
            first_epoch = epochs[0] if epochs else max(epoch_end, default=-1) + 1
            offset = epoch_end.get(first_epoch - 1, max(epoch_end.values(), default=0))
            last_step = None
            for _, tag, step, value in events:
                kind, _, metric = tag.partition("_")
                if kind == "batch" and split == "train":
                    last_step = offset + step
                    points[(split, "step", metric)][last_step] = value
                elif kind == "epoch":
                    epoch_values[(split, metric)][step] = value
                    if last_step is not None:
                        epoch_end[step] = last_step
    for (split, metric), values in epoch_values.items():
        for epoch, value in values.items():
            points[(split, "epoch", metric)][epoch_end.get(epoch, epoch + 1)] = value
    return points, first_wall_time


def _scalars(path):
    """[(wall time, tag, step, value)] of the scalar summaries in one event file, in
    the order written."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    result = []
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            # Per-class scores (`epoch_f1/PER`) are the table's, read from the run's evaluations/.
            if not value.HasField("tensor") or "/" in value.tag:
                continue
            array = make_ndarray(value.tensor)
            if array.shape == () and array.dtype.kind in "fiu":
                result.append((event.wall_time, value.tag, event.step, float(array)))
    return result


STYLES = {  # (split, kind) -> legend label and line style
    ("train", "step"): ("train (mean since epoch start)", dict(color="tab:blue", linewidth=1)),
    ("train", "epoch"): ("train, per epoch", dict(color="tab:blue", marker="o", linestyle="none", markersize=4)),
    ("validation", "epoch"): ("validation, per epoch", dict(color="tab:orange", marker="s", markersize=4)),
}


def read_best_report(run_dir):
    """(epoch, `EvaluationReport`) of the run's best epoch (`best_metrics.json`), else of
    its last evaluated one; None for a run that wrote no `evaluations/`."""
    from bert_keras.training.evaluation_summaries import REPORTS, read_report

    run_dir = Path(run_dir)
    best = run_dir / "best_metrics.json"
    epochs = [int(path.stem.removeprefix("epoch-")) for path in (run_dir / REPORTS).glob("epoch-*.json")]
    if best.is_file():
        epoch = json.loads(best.read_text(encoding="utf-8")).get("epoch")
    else:
        epoch = max(epochs, default=None)
    report = None if epoch is None else read_report(run_dir, epoch)
    return None if report is None else (epoch, report)


def plot(curves, title, output, best=None):
    """Draws one panel per metric ("loss" first) into the PNG `output`, then, with
    `best` (`read_best_report`), that epoch's confusion matrix and per-class table."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    metrics = sorted(curves.series, key=lambda name: (name != "loss", name))
    breakdown = report_panels(*best) if best else []
    columns = min(COLUMNS, len(metrics) + len(breakdown))
    rows = math.ceil((len(metrics) + len(breakdown)) / columns)
    figure = Figure(figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    for index, metric in enumerate(metrics):
        axes = figure.add_subplot(rows, columns, index + 1)
        for key in sorted(curves.series[metric], key=list(STYLES).index):
            steps, values = zip(*curves.series[metric][key])
            label, style = STYLES[key]
            if (key[0], "step") not in curves.series[metric]:  # epoch values are the only curve
                style = {**style, "linestyle": "-"}
            axes.plot(steps, values, label=label, **style)
        for name, start, *_ in curves.phases[1:]:
            axes.axvline(start, color="grey", linestyle=":", linewidth=1)
            axes.annotate(name, (start, 1), xycoords=("data", "axes fraction"), va="top", fontsize=7, color="grey")
        axes.set_title(metric)
        axes.set_xlabel(curves.x_label)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    for index, draw in enumerate(breakdown, start=len(metrics)):
        draw(figure.add_subplot(rows, columns, index + 1))
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, format="png")


def report_panels(epoch, report):
    """Functions that draw `report`'s confusion matrix (a classifier's) and per-class table on an axes."""
    from bert_keras.training.evaluation_summaries import draw_confusion

    def confusion(axes):
        draw_confusion(axes, report.confusion, report.labels)
        axes.set_title(f"confusion matrix, epoch {epoch}")

    def table(axes):
        metrics = ("precision", "recall", "f1")
        cells = [[f"{report.per_class[label][metric]:.3f}" for metric in metrics] for label in report.per_class]
        axes.axis("off")
        drawn = axes.table(cellText=cells, rowLabels=list(report.per_class), colLabels=metrics, loc="center")
        for cell in drawn.get_celld().values():
            cell.get_text().set_parse_math(False)  # class names are text, never TeX
        axes.set_title(f"per class, epoch {epoch}")

    return [*([confusion] if report.confusion is not None else []), *([table] if report.per_class else [])]


def run(args):
    run_dir = Path(args.run_dir)
    curves = read_curves(run_dir)
    best = read_best_report(run_dir)
    output = Path(args.output) if args.output else run_dir / "training_curves.png"
    phases = ", ".join(f"{name}: {unit}s {start + 1}-{last}" for name, start, last, unit in curves.phases if name)
    plot(curves, f"{run_dir.resolve().name}" + (f" ({phases})" if phases else ""), output, best)
    print(f"wrote {len(curves.series)} metric panels ({', '.join(sorted(curves.series))}) to {output}")
    if best:
        print(f"with the per-class scores of epoch {best[0]}" + (" and its confusion matrix" * bool(best[1].confusion)))
    return 0

"""A search's grids and results read for people, with no Optuna: the paper's grids, trial
names, the best trial, a table per configuration (mean, sd, min, max over its seeds) and a
plot of every trial."""

import math
import statistics

# Appendix A.3 of the paper, and Section 4.1 (GLUE).
PRESETS = {
    "devlin": {"batch_size": [16, 32], "learning_rate": [5e-5, 3e-5, 2e-5], "epochs": [2, 3, 4]},
    "devlin-glue": {"batch_size": [32], "epochs": [3], "learning_rate": [5e-5, 4e-5, 3e-5, 2e-5]},
}
# How a setting is written in a trial's name; others by their own name.
SHORT_NAMES = {
    "learning_rate": "lr",
    "batch_size": "bs",
    "epochs": "ep",
    "seed": "seed",
    "bias_correction": "bc",
    "reinit_layers": "reinit",
}


def trial_name(params):
    """A trial's name from its settings, the same in every worker: `lr3e-05_bs32_ep3_seed2`."""
    return "_".join(f"{SHORT_NAMES.get(name, name)}{_shown(value)}" for name, value in params.items())


def _shown(value):
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def best_record(records):
    """The complete trial of the best main dev metric (None: none complete)."""
    complete = [record for record in records if record["status"] == "complete"]
    return max(complete, key=lambda record: record["value"], default=None)


def configuration(params):
    """A trial's configuration: its settings but the seed."""
    return {name: value for name, value in params.items() if name != "seed"}


def summary(records):
    """Rows per configuration over its complete trials: (configuration name, count, mean,
    sd (None for one), min, max, whether it holds the best trial), in the order first run."""
    groups = {}
    for record in records:
        groups.setdefault(trial_name(configuration(record["params"])), []).append(record)
    best = best_record(records)
    rows = []
    for name, group in groups.items():
        values = [record["value"] for record in group if record["status"] == "complete"]
        if not values:
            rows.append((name or "all", 0, None, None, None, None, False))
            continue
        sd = statistics.stdev(values) if len(values) > 1 else None
        rows.append((name or "all", len(values), statistics.mean(values), sd, min(values), max(values), best in group))
    return rows


def format_summary(records):
    """The summary as a text table, the best configuration marked `*`; the counts of failed and discarded trials."""
    main_metric = next((record["main_metric"] for record in records if "main_metric" in record), "dev metric")
    lines = [f"{'configuration':<32} {'runs':>4} {'mean':>7} {'sd':>7} {'min':>7} {'max':>7}  ({main_metric})"]
    for name, count, mean, sd, low, high, best in summary(records):
        cells = [f"{value:7.4f}" if value is not None else f"{'-':>7}" for value in (mean, sd, low, high)]
        lines.append(f"{name:<32} {count:>4} {' '.join(cells)}{'  *' if best else ''}")
    best = best_record(records)
    statuses = [record["status"] for record in records]
    lines.append(", ".join(f"{statuses.count(status)} {status}" for status in ("complete", "failed", "discarded")))
    if best is not None:
        lines.append(f"best: {best['trial']} ({main_metric} {best['value']:.4f})")
    return "\n".join(lines)


def plot_search(records, output):
    """`output` (PNG): the main dev metric of every complete trial by configuration, its
    restarts as points and their mean as a bar; the best trial circled."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = summary(records)
    complete = [record for record in records if record["status"] == "complete"]
    if not complete:
        return
    names = [row[0] for row in rows]
    figure = Figure(figsize=(max(4.5, 0.6 * len(names) + 2), 3.6), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for index, (_, count, mean, *_rest) in enumerate(rows):
        if count:
            axes.bar(index, mean, width=0.6, color="tab:blue", alpha=0.3)
    positions = [names.index(trial_name(configuration(record["params"])) or "all") for record in complete]
    axes.plot(positions, [record["value"] for record in complete], "o", color="tab:blue", markersize=4)
    best = best_record(records)
    axes.plot(
        names.index(trial_name(configuration(best["params"])) or "all"),
        best["value"],
        "o",
        markersize=10,
        markerfacecolor="none",
        color="tab:red",
        label=f"best: {best['trial']}",
    )
    low = min(record["value"] for record in complete)
    axes.set_ylim(bottom=math.floor(20 * low) / 20 if low > 0 else low)
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    axes.set_ylabel(complete[0]["main_metric"])
    axes.set_title("dev metric by configuration (points: restarts)")
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize=7)
    figure.savefig(output, format="png")

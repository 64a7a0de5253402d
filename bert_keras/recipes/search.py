"""The paper's fine-tuning search: a grid of settings times random restarts, each trial an
ordinary fine-tuning run, the best on dev kept; shared by any number of workers through one
Optuna study.

Every trial is enqueued once, by the worker that creates the study, and the others pop the
waiting trials (`Study.ask`, which the storages make atomic), so each runs exactly once. A
worker beats a heartbeat (the trial's `heartbeat` user attribute) while it trains; a trial
silent for `grace_period` seconds is failed by the first worker to notice and enqueued again,
and whoever takes it resumes it from its folder's backups. Works with Optuna's storages: a
journal file (the default, `OUTPUT/study.journal`, for a shared filesystem) or an RDB URL.
"""

import itertools
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import optuna

from bert_keras.recipes.search_report import SHORT_NAMES, best_record, plot_search, trial_name

STUDY_NAME = "search"
# A trial is discarded only against at least this many other trials evaluated at the same point.
MIN_PEERS = 2
# The share of the trials at the discard point that go on: those not below their median.
DISCARD_KEEP = 0.5
STATUS = {"COMPLETE": "complete", "FAIL": "failed", "PRUNED": "discarded"}


class TrialDiscarded(optuna.TrialPruned):
    """A trial stopped early: outside the best share of the trials at the same point of training."""


def grid(dimensions, restarts=None, seed=0):
    """The trials (settings dicts) of the product of `dimensions` (name -> list of values),
    the settings in `SHORT_NAMES`' order, then by name; `restarts`: each configuration with
    seeds `seed`, `seed + 1`, ... (`restarts` of them)."""
    dimensions = dict(dimensions)
    for name, values in dimensions.items():
        if not values:
            raise ValueError(f"{name}: an empty list of values")
    if restarts is not None:
        if restarts < 1:
            raise ValueError(f"restarts must be at least 1, got {restarts}")
        if "seed" in dimensions:
            raise ValueError("seeds given both as a list and as restarts: give one")
        dimensions["seed"] = list(range(seed, seed + restarts))
    names = sorted(dimensions, key=lambda name: (list(SHORT_NAMES).index(name) if name in SHORT_NAMES else 99, name))
    return [dict(zip(names, values)) for values in itertools.product(*(dimensions[name] for name in names))]


def open_storage(url, output_dir):
    """The Optuna storage of `url`: an RDB URL (`sqlite:///x.db`, `postgresql://...`), a
    journal file path, or None: `output_dir/study.journal`. An unopenable one is a ValueError naming it."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    path = Path(output_dir) / "study.journal" if url is None else url
    try:
        if url is not None and "://" in url:
            return RDBStorage(url)
        return JournalStorage(JournalFileBackend(str(path)))
    except Exception as error:  # the drivers' errors have no common base
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"--study {path}: cannot open it as an Optuna storage ({first_line})") from None


def search(
    trials,
    run_trial,
    output_dir,
    *,
    study=None,
    identity=None,
    discard_after=None,
    discard_keep=DISCARD_KEEP,
    keep_models=False,
    grace_period=300,
    wait_seconds=None,
):
    """Runs the `trials` (settings dicts, e.g. from `grid`) as one search in `output_dir`,
    with any other worker started on the same `study` (an Optuna storage URL or journal
    path; None: `output_dir/study.journal`). `run_trial(params, trial_dir, interim)` runs one
    trial, a `recipes.finetune` into `trial_dir` (resumed when it holds one) that leaves
    `eval_results.json` and `best.keras` there, passing `interim` (None, or (fraction,
    report) with `discard_after`) as its `interim_evaluation`. `identity` (JSON, e.g. a
    `run_identity.job_identity`) is what the trials share: a study of other trials or
    identity is refused naming what differs. A trial that raises is recorded as failed and
    the search goes on; `discard_after` F stops a trial whose dev metric at fraction F of
    its steps (ties broken by the dev loss) is outside the best share `discard_keep` of the
    trials there (`_reporter`; 0.5: below their median), once `MIN_PEERS` others have got
    there. Writes `search.jsonl`, `best.keras` (the other trials' models deleted unless
    `keep_models`), `search.png`. Returns the records (dicts) of the finished trials;
    the search is over when every trial has one."""
    check_discard(discard_after, discard_keep)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    names = [trial_name(params) for params in trials]
    if len(set(names)) != len(names):
        raise ValueError("the grid lists a trial twice")
    identity = {"trials": names, **(identity or {})}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study_obj = _join_study(open_storage(study, output_dir), identity, trials, wait_seconds or grace_period)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    beat = max(1.0, grace_period / 4)
    discard = None if discard_after is None else (discard_after, discard_keep)
    while True:
        _retry_stale_trials(study_obj, grace_period)
        states = _latest(study_obj).values()
        if any(trial.state == optuna.trial.TrialState.WAITING for trial in states):
            trial = study_obj.ask()
            if "trial" not in trial.user_attrs:  # another worker took the last waiting trial first
                study_obj.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            _run(study_obj, trial, run_trial, output_dir, discard, worker, beat)
        elif any(trial.state == optuna.trial.TrialState.RUNNING for trial in states):
            time.sleep(beat)  # another worker's trial: wait for it, or take it over if its worker died
        else:
            break
    records = write_records(study_obj, output_dir)
    _keep_best(records, output_dir, keep_models)
    plot_search(records, output_dir / "search.png")
    return records


def check_discard(discard_after, discard_keep):
    """A ValueError naming the flag unless `discard_after` (None: no discarding) and
    `discard_keep` are between 0 and 1."""
    if discard_after is not None and not 0 < discard_after < 1:
        raise ValueError(f"--discard-after must be a fraction between 0 and 1, got {discard_after}")
    if not 0 < discard_keep < 1:
        raise ValueError(f"--discard-keep must be a share between 0 and 1, got {discard_keep}")


def _join_study(storage, identity, trials, wait_seconds):
    """The search's study: created with every trial enqueued (the worker that creates it),
    or joined once its creator has listed the trials, refused if of another identity."""
    try:
        study = optuna.create_study(storage=storage, study_name=STUDY_NAME, direction="maximize")
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(storage=storage, study_name=STUDY_NAME)
    else:
        for params in trials:
            study.enqueue_trial(params, user_attrs={"trial": trial_name(params), "params": params})
        study.set_user_attr("identity", identity)
    deadline = time.monotonic() + wait_seconds
    while "identity" not in study.user_attrs:
        if time.monotonic() > deadline:
            raise ValueError(f"study '{STUDY_NAME}' lists no trials (its creator stopped while enqueueing them)")
        time.sleep(0.5)
    _check_identity(study.user_attrs["identity"], identity)
    return study


def _check_identity(recorded, current):
    from bert_keras import run_identity

    found = []
    old, new = recorded.get("trials", []), current["trials"]
    if old != new:
        gone, added = [name for name in old if name not in new], [name for name in new if name not in old]
        found.append(f"trials {', '.join(gone) or 'none'} there and not now, {', '.join(added) or 'none'} now")
    found += run_identity.differences(recorded, current, label=lambda name: f"--{name.replace('_', '-')}")
    if found:
        raise run_identity.RunChanged(
            f"the study holds a search of another grid or command ({'; '.join(found)}): "
            "use another --output-dir (or --study), or remove that one"
        )


def _latest(study):
    """Each trial name's latest Optuna trial (a retried one replaces the one whose worker died)."""
    latest = {}
    for trial in study.get_trials(deepcopy=False):
        if "trial" in trial.user_attrs:
            latest[trial.user_attrs["trial"]] = trial
    return latest


def _retry_stale_trials(study, grace_period):
    """Fails each running trial whose worker has been silent for `grace_period` seconds and
    enqueues it again (the worker whose `tell` wins does; others find it finished)."""
    now = time.time()
    for name, trial in _latest(study).items():
        if trial.state != optuna.trial.TrialState.RUNNING:
            continue
        last = trial.user_attrs.get("heartbeat", trial.datetime_start.timestamp())
        if now - last <= grace_period:
            continue
        try:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        except (ValueError, RuntimeError):  # another worker failed it first
            continue
        params = trial.user_attrs["params"]
        study.enqueue_trial(params, user_attrs={"trial": name, "params": params, "retry_of": trial.number})


def _run(study, trial, run_trial, output_dir, discard, worker, beat):
    """One trial: run, heartbeat kept, and told as complete, failed or discarded (`discard`:
    None or (fraction, keep), `_reporter`'s) with its record."""
    name = trial.user_attrs["trial"]
    params = trial.user_attrs["params"]
    trial_dir = output_dir / "trials" / name
    print(f"trial {name}: {worker}")
    stop = threading.Event()
    heartbeat = threading.Thread(target=_beat, args=(trial, stop, beat), daemon=True)
    heartbeat.start()
    start = time.monotonic()
    interim = None if discard is None else (discard[0], _reporter(study, trial, name, *discard))
    state, error, result = optuna.trial.TrialState.COMPLETE, None, {}
    try:
        run_trial(params, trial_dir, interim)
        result = read_trial(trial_dir)
    except optuna.TrialPruned:
        state = optuna.trial.TrialState.PRUNED
    except Exception as failure:  # a trial's error is its record; the search goes on
        state, error = optuna.trial.TrialState.FAIL, f"{type(failure).__name__}: {failure}"
    finally:
        stop.set()
        heartbeat.join()
    record = {"worker": worker, "seconds": round(time.monotonic() - start, 1)}
    if error:
        record["error"] = error.splitlines()[0] if error.strip() else error
        print(f"trial {name} failed: {record['error']}")
    record.update(result)
    for key, item in record.items():
        trial.set_user_attr(key, item)
    study.tell(trial, result.get("value"), state=state)
    write_records(study, output_dir)
    if state == optuna.trial.TrialState.PRUNED:
        shutil.rmtree(trial_dir, ignore_errors=True)


def _beat(trial, stop, interval):
    while not stop.is_set():
        trial.set_user_attr("heartbeat", time.time())
        stop.wait(interval)


def _reporter(study, trial, name, fraction, keep):
    """`report(metrics, main_metric, step)` for a trial's interim evaluation: the value
    stored as the trial's intermediate value at `fraction` (in percent, so that trials of
    other lengths meet), and TrialDiscarded raised when the trial is outside the best share
    `keep` of the n trials there, itself and discarded ones included, once `MIN_PEERS` others
    have got there: when b of them are strictly better (a higher value, or the same and a
    lower dev loss where both have one), and b / n >= keep. With keep 0.5 and distinct values
    that is below their median (of 3 the lowest goes, of 4 the lowest two)."""
    point = round(100 * fraction)

    def report(metrics, main_metric, step):
        own = (metrics[main_metric], _dev_loss(metrics, main_metric))
        trial.set_user_attr("interim", {"step": step, **metrics})
        trial.report(own[0], point)
        peers = [
            (other.intermediate_values[point], _dev_loss(other.user_attrs.get("interim", {}), main_metric))
            for other_name, other in _latest(study).items()
            if other_name != name and point in other.intermediate_values
        ]
        better = sum(_better(peer, own) for peer in peers)
        if len(peers) < MIN_PEERS or better / (len(peers) + 1) < keep:
            return
        loss = "" if own[1] is None else f" (loss {own[1]:.4f})"
        print(
            f"trial {name} discarded at step {step}: {main_metric} {own[0]:.4f}{loss} ranks {better + 1} of "
            f"{len(peers) + 1}: below the best {keep:.0%}"
        )
        raise TrialDiscarded()

    return report


def _better(first, second):
    """Whether `first` (value, loss or None) beats `second`: a higher value, or the same and a lower loss."""
    if first[0] != second[0]:
        return first[0] > second[0]
    return first[1] is not None and second[1] is not None and first[1] < second[1]


def _dev_loss(metrics, main_metric):
    """The dev loss beside `main_metric` in `metrics` (MNLI's `matched_loss` beside
    `matched_accuracy`, else `loss`), or None: a task whose evaluation has none."""
    return metrics.get(main_metric.split("_")[0] + "_loss", metrics.get("loss"))


def read_trial(trial_dir):
    """A finished trial's results from its `eval_results.json`: its main dev metric's best
    value, every dev metric by epoch, the steps trained."""
    evaluations = json.loads((Path(trial_dir) / "eval_results.json").read_text())
    summary = evaluations[-1]
    epochs = [entry for entry in evaluations if "epoch" in entry]
    main_metric = summary["main_metric"]
    return {
        "main_metric": main_metric,
        "value": max(entry[main_metric] for entry in epochs),
        "epochs": epochs,
        "steps": summary["steps"],
        "train_seconds": summary["train_seconds"],
    }


def write_records(study, output_dir):
    """`output_dir/search.jsonl` (a line per finished trial, in trial order) from the study,
    replaced whole. Returns the records."""
    records = []
    for name, trial in sorted(_latest(study).items(), key=lambda item: item[1].number):
        if trial.state.name not in STATUS:
            continue
        attrs = {key: value for key, value in trial.user_attrs.items() if key not in ("trial", "heartbeat", "retry_of")}
        records.append({"trial": name, "status": STATUS[trial.state.name], **attrs})
    path = Path(output_dir) / "search.jsonl"
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    os.replace(temporary, path)
    return records


def _keep_best(records, output_dir, keep_models):
    """`output_dir/best.keras`: the best trial's model; the others' models deleted unless `keep_models`."""
    best = best_record(records)
    if best is None:
        return
    source = output_dir / "trials" / best["trial"] / "best.keras"
    if source.exists():
        temporary = output_dir / f"best.keras.{os.getpid()}.tmp"
        shutil.copyfile(source, temporary)
        os.replace(temporary, output_dir / "best.keras")
    if not keep_models:
        for record in records:
            if record["trial"] != best["trial"]:
                (output_dir / "trials" / record["trial"] / "best.keras").unlink(missing_ok=True)

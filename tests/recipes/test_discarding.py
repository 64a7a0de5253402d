"""`--discard-after`'s rule on a real (in-memory) Optuna study, trials reporting one after
the other as one worker runs them: the median of all the trials at the point by default,
a smaller share kept with `discard_keep`, ties in the dev metric broken by the dev loss."""

import statistics

import numpy as np
import optuna
import pytest

from bert_keras.recipes.search import MIN_PEERS, TrialDiscarded, _reporter


def discarded(evaluations, keep=0.5, main_metric="f1"):
    """The indices of `evaluations` (dev metrics, one a trial, in the order they report at
    30% of 100 steps) whose trial the search stops."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    stopped = []
    for index, metrics in enumerate(evaluations):
        trial = study.ask()
        trial.set_user_attr("trial", f"seed{index}")
        try:
            _reporter(study, trial, f"seed{index}", 0.3, keep)(metrics, main_metric, 30)
        except TrialDiscarded:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            stopped.append(index)
        else:
            study.tell(trial, metrics[main_metric])
    return stopped


VALUES = np.random.default_rng(0).permutation(np.linspace(0.6, 0.9, 16)).tolist()


def test_keep_half_on_distinct_values_is_the_median_of_all_the_trials_there():
    """Without ties the default stops a trial below the median of the trials at the point,
    itself included (of 3 the lowest, of 4 the lowest two), once MIN_PEERS others are there."""
    expected = [
        index
        for index, value in enumerate(VALUES)
        if index >= MIN_PEERS and value < statistics.median(VALUES[: index + 1])
    ]
    assert discarded([{"f1": value} for value in VALUES]) == expected
    assert discarded([{"f1": value} for value in (0.8, 0.9, 0.7, 0.75)]) == [2, 3]  # 0.75 ranks 3 of 4


def test_a_smaller_share_kept_stops_more_trials():
    """keep 0.25: a trial goes on only among the best quarter of the trials at the point."""
    quarter = discarded([{"f1": value} for value in VALUES], keep=0.25)
    for index, value in enumerate(VALUES[MIN_PEERS:], MIN_PEERS):
        rank = sorted(VALUES[: index + 1], reverse=True).index(value)  # 0: the best so far
        assert (index in quarter) == (rank >= 0.25 * (index + 1)), (index, rank)
    assert set(discarded([{"f1": value} for value in VALUES])) < set(quarter)


@pytest.mark.parametrize("main_metric, loss", [("f1", "loss"), ("matched_accuracy", "matched_loss")])
def test_ties_in_the_metric_go_to_the_lower_dev_loss(main_metric, loss, capsys):
    """MRPC's trials that still predict every pair positive tie at the majority class's F1:
    the median rule stopped none of them; their losses rank them. A tie where one trial has
    no loss stays a tie (MNLI's other dev set's loss plays no part)."""
    tied = 0.8122270742358079
    other = "mismatched_loss" if loss == "matched_loss" else "accuracy"
    losses = [0.60, 0.62, 0.65, 0.59, 0.63]
    evaluations = [{main_metric: tied, loss: value, other: 1 - value} for value in losses]
    assert discarded(evaluations, main_metric=main_metric) == [2, 4]
    out = capsys.readouterr().out
    assert (
        f"trial seed2 discarded at step 30: {main_metric} 0.8122 (loss 0.6500) ranks 3 of 3: below the best 50%" in out
    )
    assert "trial seed4 discarded at step 30: " in out and "ranks 4 of 5" in out
    no_loss = [*evaluations[:2], {main_metric: tied}]
    assert discarded(no_loss, main_metric=main_metric) == []

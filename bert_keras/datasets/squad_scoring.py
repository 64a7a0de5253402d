"""SQuAD answers from a `BertSpanLabeler`'s logits, scored as the official scripts do:
n-best decoding of each question's windows (`squad.Features`) mapped back to the
context through byte offsets, and EM/F1 of v1.1 and v2.0.

As the original run_squad: the `n_best_size` best starts and ends of each window form
candidate spans of at most `max_answer_length` tokens, a token scored only from the
window where it has the most context; v2.0 answers "" when the null score (the [CLS]
logits) beats the best span by more than `null_score_diff_threshold`.
"""

import collections
import re
import string

import numpy as np

from bert_keras.tasks.span_labeler import MAX_ANSWER_TOKENS


def _candidate_spans(features, feature, starts, ends, n_best_size, max_answer_length):
    """(total, start logit, end logit, byte begin, byte end) of a window's spans: pairs
    of its `n_best_size` best starts and ends that lie in the context, start in the
    window that gives them the most context, and are at most `max_answer_length` long."""
    top_starts = np.argsort(-starts, kind="stable")[:n_best_size]
    top_ends = np.argsort(-ends, kind="stable")[:n_best_size]
    s, e = np.meshgrid(top_starts, top_ends, indexing="ij")
    s, e = s.ravel(), e.ravel()
    valid = (
        (features.token_start[feature][s] >= 0)
        & (features.token_start[feature][e] >= 0)
        & features.max_context[feature][s]
        & (e >= s)
        & (e - s + 1 <= max_answer_length)
    )
    return [
        (
            float(starts[i] + ends[j]),
            float(starts[i]),
            float(ends[j]),
            int(features.token_start[feature][i]),
            int(features.token_end[feature][j]),
        )
        for i, j in zip(s[valid], e[valid])
    ]


def _nbest(candidates, context, n_best_size, version_2, null_score):
    """The n-best list of distinct answer texts, best first, with their probabilities;
    v2.0 keeps the null answer (`null_score`) among them when it scores."""
    candidates.sort(key=lambda c: -c[0])
    nbest, seen = [], set()
    for _total, start_logit, end_logit, begin, end in candidates:
        text = context[begin:end].decode("utf-8", errors="ignore")
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": start_logit, "end_logit": end_logit})
        if len(nbest) == n_best_size:
            break
    if version_2:
        nbest.append({"text": "", "start_logit": null_score, "end_logit": 0.0})
        nbest.sort(key=lambda entry: -(entry["start_logit"] + entry["end_logit"]))
        nbest = nbest[:n_best_size]
    if not nbest:
        nbest = [{"text": "empty", "start_logit": 0.0, "end_logit": 0.0}]
    totals = np.array([entry["start_logit"] + entry["end_logit"] for entry in nbest])
    probabilities = np.exp(totals - totals.max())
    probabilities /= probabilities.sum()
    for entry, probability in zip(nbest, probabilities):
        entry["probability"] = float(probability)
    return nbest


def decode(
    examples,
    features,
    start_logits,
    end_logits,
    n_best_size=20,
    max_answer_length=MAX_ANSWER_TOKENS,
    version_2=False,
    null_score_diff_threshold=0.0,
):
    """{qas_id: answer text}, {qas_id: n-best list}, {qas_id: null score diff} (v2.0)."""
    by_example = collections.defaultdict(list)
    for feature, example_index in enumerate(features.example_index):
        by_example[int(example_index)].append(feature)
    predictions, nbest_json, null_odds = {}, {}, {}
    for index, example in enumerate(examples):
        candidates = []
        null_score = None
        for feature in by_example[index]:
            starts, ends = start_logits[feature], end_logits[feature]
            if version_2:
                score = float(starts[0] + ends[0])
                null_score = score if null_score is None else min(null_score, score)
            candidates += _candidate_spans(features, feature, starts, ends, n_best_size, max_answer_length)
        nbest = _nbest(candidates, example.context.encode("utf-8"), n_best_size, version_2, null_score)
        nbest_json[example.qas_id] = nbest
        best_non_null = next((entry for entry in nbest if entry["text"]), None)
        if not version_2:
            predictions[example.qas_id] = nbest[0]["text"]
            continue
        best_score = best_non_null["start_logit"] + best_non_null["end_logit"] if best_non_null else float("-inf")
        null_odds[example.qas_id] = null_score - best_score
        predictions[example.qas_id] = (
            ""
            if best_non_null is None or null_score - best_score > null_score_diff_threshold
            else best_non_null["text"]
        )
    return predictions, nbest_json, null_odds


# --- the official evaluation scripts (v1.1 and v2.0), transcribed ---------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text):
    """Lower-case, drop punctuation, drop the articles a/an/the, squeeze white space."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction, truth):
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction, truth, version_2=False):
    """Token F1 of the normalised texts. v1.1 scores 0 when nothing is shared (even
    two empty answers); v2.0 scores 1 when both are empty and 0 when one is."""
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if version_2 and (not predicted or not gold):
        return float(predicted == gold)
    common = collections.Counter(predicted) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def evaluate(examples, predictions, version_2=False):
    """{"exact_match", "f1"} in percent over `examples`, each the max over its gold
    answers; a question without a prediction scores 0. v2.0 uses only gold answers that
    are non-empty after normalisation, or [""] for unanswerable questions."""
    total_em = total_f1 = 0.0
    for example in examples:
        golds = [answer["text"] for answer in example.answers]
        if version_2:
            golds = [text for text in golds if normalize_answer(text)] or [""]
        if example.qas_id not in predictions:
            continue
        prediction = predictions[example.qas_id]
        total_em += max(exact_match(prediction, gold) for gold in golds)
        total_f1 += max(f1_score(prediction, gold, version_2) for gold in golds)
    count = max(len(examples), 1)
    return {"exact_match": 100.0 * total_em / count, "f1": 100.0 * total_f1 / count}

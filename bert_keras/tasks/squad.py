"""SQuAD v1.1 / v2.0 for a `BertSpanLabeler`: windowed features, n-best decoding mapped
back to the context through byte offsets, and EM/F1 exactly as the official scripts.

As the original run_squad: the context is cut into windows of `max_seq_length` tokens
(`[CLS] question [SEP] window [SEP]`, question cut to `max_query_length`) that start
`doc_stride` tokens apart; a token is scored only from the window where it has the
most context; the `n_best_size` best starts and ends of each window form candidate
spans of at most `max_answer_length` tokens; v2.0 answers "" when the null score
(the [CLS] logits) beats the best span by more than `null_score_diff_threshold`.

`bert-keras finetune squad` (pipelines/squad.py) trains and scores with these.
"""

import collections
import dataclasses
import json
import re
import string
from pathlib import Path

from bert_keras.files import read_text
from bert_keras.tasks.span_labeler import MAX_ANSWER_TOKENS, PADDING_LOGIT


@dataclasses.dataclass
class Example:
    qas_id: str
    question: str
    context: str
    answers: list  # [{"text", "answer_start"}] (character offsets, as in the file)
    is_impossible: bool = False
    article: int = 0


@dataclasses.dataclass
class Features:
    """Windows as numpy arrays, one row per window: packed `input_word_ids`, `input_mask`,
    `input_type_ids` [N, max_seq_length]; `example_index` [N]; per token the byte span
    in the context (`token_start`/`token_end`, -1 outside the context) and whether this
    window gives it the most context (`max_context`); the training targets
    `start_positions`/`end_positions` (0, the [CLS], when the answer is not inside)."""

    input_word_ids: object
    input_mask: object
    input_type_ids: object
    example_index: object
    token_start: object
    token_end: object
    max_context: object
    start_positions: object
    end_positions: object

    def __len__(self):
        return len(self.example_index)

    def inputs(self):
        return {
            "input_word_ids": self.input_word_ids,
            "input_mask": self.input_mask,
            "input_type_ids": self.input_type_ids,
        }


def read_squad(path, articles=None):
    """Examples of a SQuAD json file; `articles` (a slice or range) keeps only those
    articles (e.g. `slice(0, 36)`)."""
    path = Path(path)
    try:
        data = json.loads(read_text(path, "SQuAD json"))["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a SQuAD json file ({type(error).__name__}: {error})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: 'data' must be a list of articles, got {type(data).__name__}")
    indices = range(len(data))
    if articles is not None:
        indices = indices[articles] if isinstance(articles, slice) else articles
    examples = []
    for article in indices:
        where = f"data[{article}]"
        try:
            for p, paragraph in enumerate(data[article]["paragraphs"]):
                where = f"data[{article}].paragraphs[{p}]"
                context = _text_field(paragraph, "context")
                for q, qa in enumerate(paragraph["qas"]):
                    where = f"data[{article}].paragraphs[{p}].qas[{q}]"
                    impossible = bool(qa.get("is_impossible", False))
                    answers = [] if impossible else [_answer(answer) for answer in qa["answers"]]
                    examples.append(
                        Example(
                            _text_field(qa, "id"), _text_field(qa, "question"), context, answers, impossible, article
                        )
                    )
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as error:
            raise ValueError(
                f"{path}: {where} is not a SQuAD v1.1/v2.0 entry ({type(error).__name__}: {error})"
            ) from None
    return examples


def _text_field(entry, key):
    if not isinstance(entry[key], str):
        raise TypeError(f"{key!r} is {type(entry[key]).__name__}, not a string")
    return entry[key]


def _answer(answer):
    """An answer dict checked for the fields the features use: text and answer_start."""
    _text_field(answer, "text")
    if isinstance(answer["answer_start"], bool) or not isinstance(answer["answer_start"], int):
        raise TypeError(f"answer_start is {answer['answer_start']!r}, not an integer")
    return answer


def tokenize_with_offsets(tokenizer, texts, batch_size=512):
    """[(ids, byte starts, byte ends)] per text, numpy."""
    import tensorflow as tf

    result = []
    for start in range(0, len(texts), batch_size):
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(texts[start : start + batch_size]))
        for row in zip(ids.to_list(), starts.to_list(), ends.to_list()):
            result.append(row)
    return result


def make_features(examples, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64):
    """Windows of every example (see the module doc), as `Features`."""
    import numpy as np

    contexts = sorted({example.context for example in examples})
    context_tokens = dict(zip(contexts, tokenize_with_offsets(tokenizer, contexts)))
    questions = tokenize_with_offsets(tokenizer, [example.question for example in examples])
    rows = collections.defaultdict(list)
    for index, (example, question) in enumerate(zip(examples, questions)):
        query = question[0][:max_query_length]
        ids, starts, ends = (np.asarray(part, "int64") for part in context_tokens[example.context])
        answer_span = _answer_tokens(example, starts, ends)
        max_tokens = max_seq_length - len(query) - 3
        if max_tokens < 1:
            raise ValueError(
                f"max_seq_length {max_seq_length} leaves no room for the context after a "
                f"{len(query)}-token question; lower max_query_length"
            )
        windows = []
        offset = 0
        while True:
            length = min(len(ids) - offset, max_tokens)
            windows.append((offset, length))
            if offset + length >= len(ids):
                break
            offset += min(length, doc_stride)
        best = _max_context_window(windows, len(ids))
        doc_offset = len(query) + 2
        for number, (offset, length) in enumerate(windows):
            word_ids = np.zeros(max_seq_length, "int32")
            packed = [tokenizer.cls_id, *query, tokenizer.sep_id, *ids[offset : offset + length], tokenizer.sep_id]
            word_ids[: len(packed)] = packed
            type_ids = np.zeros(max_seq_length, "int32")
            type_ids[doc_offset : len(packed)] = 1
            token_start = np.full(max_seq_length, -1, "int64")
            token_end = np.full(max_seq_length, -1, "int64")
            token_start[doc_offset : doc_offset + length] = starts[offset : offset + length]
            token_end[doc_offset : doc_offset + length] = ends[offset : offset + length]
            max_context = np.zeros(max_seq_length, bool)
            max_context[doc_offset : doc_offset + length] = best[offset : offset + length] == number
            start_position = end_position = 0
            if answer_span is not None and offset <= answer_span[0] and answer_span[1] < offset + length:
                start_position = answer_span[0] - offset + doc_offset
                end_position = answer_span[1] - offset + doc_offset
            rows["input_word_ids"].append(word_ids)
            rows["input_mask"].append((np.arange(max_seq_length) < len(packed)).astype("int32"))
            rows["input_type_ids"].append(type_ids)
            rows["example_index"].append(index)
            rows["token_start"].append(token_start)
            rows["token_end"].append(token_end)
            rows["max_context"].append(max_context)
            rows["start_positions"].append(start_position)
            rows["end_positions"].append(end_position)
    return Features(**{name: np.asarray(values) for name, values in rows.items()})


def _answer_tokens(example, starts, ends):
    """(first, last) context token of the gold answer, or None. Of several gold answers
    (dev sets), the shortest whose text starts and ends on token boundaries; else the
    first answer (its span then covers the whole tokens around it)."""
    if example.is_impossible or not example.answers:
        return None
    spans = []
    for order, answer in enumerate(example.answers):
        begin = len(example.context[: answer["answer_start"]].encode("utf-8"))
        end = begin + len(answer["text"].encode("utf-8"))
        tokens = ((ends > begin) & (starts < end)).nonzero()[0]
        if len(tokens):
            first, last = int(tokens[0]), int(tokens[-1])
            aligned = starts[first] == begin and ends[last] == end
            spans.append(((not aligned, last - first if aligned else order), (first, last)))
    return min(spans)[1] if spans else None  # None: the answer is only white space or removed characters


def _max_context_window(windows, num_tokens):
    """For each context token, the window in which min(left, right context) + 0.01 *
    window length is highest (the first such window on ties), as the original."""
    import numpy as np

    best_score = np.full(num_tokens, -1.0)
    best = np.zeros(num_tokens, "int64")
    for number, (offset, length) in enumerate(windows):
        position = np.arange(length)
        score = np.minimum(position, length - 1 - position) + 0.01 * length
        better = score > best_score[offset : offset + length]
        best_score[offset : offset + length] = np.where(better, score, best_score[offset : offset + length])
        best[offset : offset + length] = np.where(better, number, best[offset : offset + length])
    return best


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
    import numpy as np

    by_example = collections.defaultdict(list)
    for feature, example_index in enumerate(features.example_index):
        by_example[int(example_index)].append(feature)
    predictions, nbest_json, null_odds = {}, {}, {}
    for index, example in enumerate(examples):
        context = example.context.encode("utf-8")
        candidates = []
        null_score = None
        for feature in by_example[index]:
            starts, ends = start_logits[feature], end_logits[feature]
            if version_2:
                score = float(starts[0] + ends[0])
                null_score = score if null_score is None else min(null_score, score)
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
            for i, j in zip(s[valid], e[valid]):
                candidates.append(
                    (
                        float(starts[i] + ends[j]),
                        float(starts[i]),
                        float(ends[j]),
                        int(features.token_start[feature][i]),
                        int(features.token_end[feature][j]),
                    )
                )
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
            # The original keeps the null answer among the n-best when it scores.
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


# --- batching and prediction -------------------------------------------------------


def feature_batches(features, batch_size, shuffle=False, seed=0, labelled=True):
    """Batches of features cut to the longest window in the batch (dynamic padding)."""
    import tensorflow as tf

    inputs = features.inputs()
    data = (
        (inputs, {"start_logits": features.start_positions, "end_logits": features.end_positions})
        if labelled
        else (inputs,)
    )
    dataset = tf.data.Dataset.from_tensor_slices(data)
    if shuffle:
        dataset = dataset.shuffle(len(features), seed=seed, reshuffle_each_iteration=True)

    def trim(inputs, *labels):
        length = tf.reduce_max(tf.reduce_sum(inputs["input_mask"], axis=1))
        length = (length + 7) // 8 * 8
        return ({name: t[:, :length] for name, t in inputs.items()}, *labels)

    return dataset.batch(batch_size).map(trim).prefetch(tf.data.AUTOTUNE)


def predict_logits(model, features, batch_size):
    import numpy as np

    starts, ends = [], []
    for (inputs,) in feature_batches(features, batch_size, labelled=False):
        outputs = model.predict_on_batch(inputs)
        width = features.input_word_ids.shape[1] - outputs["start_logits"].shape[1]
        starts.append(np.pad(outputs["start_logits"], ((0, 0), (0, width)), constant_values=PADDING_LOGIT))
        ends.append(np.pad(outputs["end_logits"], ((0, 0), (0, width)), constant_values=PADDING_LOGIT))
    return np.concatenate(starts), np.concatenate(ends)

"""SQuAD v1.1 / v2.0 for a `BertSpanLabeler`: the json files read, windowed features,
their batches and logits; decoding and EM/F1 are `squad_scoring`.

As the original run_squad: the context is cut into windows of `max_seq_length` tokens
(`[CLS] question [SEP] window [SEP]`, question cut to `max_query_length`) that start
`doc_stride` tokens apart; a token is scored only from the window where it has the
most context (`_max_context_window`).

`SquadData` is the `TaskData` that `bert-keras finetune squad` trains and scores with.
"""

import collections
import dataclasses
import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_keras.datasets.squad_scoring import decode, evaluate
from bert_keras.datasets.task_data import TaskData
from bert_keras.files import read_text
from bert_keras.tasks.span_labeler import PADDING_LOGIT


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
    result = []
    for start in range(0, len(texts), batch_size):
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(texts[start : start + batch_size]))
        for row in zip(ids.to_list(), starts.to_list(), ends.to_list()):
            result.append(row)
    return result


def make_features(examples, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64):
    """Windows of every example (see the module doc), as `Features`."""
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
    best_score = np.full(num_tokens, -1.0)
    best = np.zeros(num_tokens, "int64")
    for number, (offset, length) in enumerate(windows):
        position = np.arange(length)
        score = np.minimum(position, length - 1 - position) + 0.01 * length
        better = score > best_score[offset : offset + length]
        best_score[offset : offset + length] = np.where(better, score, best_score[offset : offset + length])
        best[offset : offset + length] = np.where(better, number, best[offset : offset + length])
    return best


# --- batching and prediction -------------------------------------------------------


def feature_batches(features, batch_size, shuffle=False, seed=0, labelled=True):
    """Batches of features cut to the longest window in the batch (dynamic padding)."""
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
    starts, ends = [], []
    for (inputs,) in feature_batches(features, batch_size, labelled=False):
        outputs = model.predict_on_batch(inputs)
        width = features.input_word_ids.shape[1] - outputs["start_logits"].shape[1]
        starts.append(np.pad(outputs["start_logits"], ((0, 0), (0, width)), constant_values=PADDING_LOGIT))
        ends.append(np.pad(outputs["end_logits"], ((0, 0), (0, width)), constant_values=PADDING_LOGIT))
    return np.concatenate(starts), np.concatenate(ends)


class SquadData(TaskData):
    """SQuAD json files (`train_articles`/`predict_articles`: slices of their articles;
    the first `max_examples` questions) for a `BertSpanLabeler`: trained on packed
    windows (`prepare` cuts them with the model's tokenizer), scored by the official
    EM/F1 of the decoded answers and kept by F1. `options` are `make_features`' window
    sizes and `decode`'s n-best settings."""

    labels = None
    main_metric = "f1"
    preprocessed = True

    def __init__(
        self,
        train_file,
        predict_file,
        train_articles=None,
        predict_articles=None,
        max_examples=None,
        version_2=False,
        **options,
    ):
        self.train = read_squad(train_file, train_articles)[:max_examples]
        self.dev = read_squad(predict_file, predict_articles)[:max_examples]
        self.version_2 = version_2
        self.window_options = {
            k: options[k] for k in ("max_seq_length", "doc_stride", "max_query_length") if k in options
        }
        self.decode_options = {
            k: options[k] for k in ("n_best_size", "max_answer_length", "null_score_diff_threshold") if k in options
        }
        self.train_features = self.dev_features = None
        self.decoded = None  # the last evaluation's predictions, n-best lists and null odds
        self.dev_size = len(self.dev)

    @property
    def train_size(self):
        """Training windows (after `prepare`)."""
        return len(self.train_features)

    def prepare(self, model):
        tokenizer = model.preprocessor.tokenizer
        self.train_features = make_features(self.train, tokenizer, **self.window_options)
        self.dev_features = make_features(self.dev, tokenizer, **self.window_options)

    def train_batches(self, batch_size, seed):
        return feature_batches(self.train_features, batch_size, shuffle=True, seed=seed)

    def evaluate(self, model, batch_size):
        start_logits, end_logits = predict_logits(model, self.dev_features, batch_size)
        self.decoded = decode(
            self.dev, self.dev_features, start_logits, end_logits, version_2=self.version_2, **self.decode_options
        )
        return evaluate(self.dev, self.decoded[0], self.version_2)

    def write_predictions(self, output_dir):
        """The last evaluation's answers in the official formats: predictions.json,
        nbest_predictions.json (and null_odds.json for v2.0)."""
        output_dir = Path(output_dir)
        predictions, nbest, null_odds = self.decoded
        text = json.dumps(predictions, indent=2, ensure_ascii=False)
        (output_dir / "predictions.json").write_text(text + "\n")
        (output_dir / "nbest_predictions.json").write_text(json.dumps(nbest, indent=2, ensure_ascii=False) + "\n")
        if self.version_2:
            (output_dir / "null_odds.json").write_text(json.dumps(null_odds, indent=2) + "\n")

"""CoNLL-2003 NER for a `BertTokenClassifier`: read the 4-column files, convert IOB1
tags to IOB2, predict each word's tag from its first WordPiece, and score entities
exactly as the conlleval script does.

The paper's CoNLL-2003 results use "maximal document context": `document_context`
packs each sentence with the words around it in its document (`-DOCSTART-` lines
delimit documents), and only the sentence's own words are labelled and scored.

`ConllData` is the `TaskData` that `bert-keras finetune conll` and `distill --task conll`
train and score with.
"""

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_keras.datasets.metrics import precision_recall_f1
from bert_keras.datasets.task_data import TaskData
from bert_keras.files import read_text
from bert_keras.tasks.token_classifier import IGNORE_LABEL
from bert_keras.training.evaluation_summaries import EvaluationReport, most_confident_errors
from bert_keras.training.finetuning import length_grouped_batches

# IOB2 tags of CoNLL-2003, "O" first.
LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


@dataclasses.dataclass
class Sentence:
    words: list
    tags: list
    document: int = 0  # index of its document in the file (-DOCSTART- lines start one)


@dataclasses.dataclass
class InContext:
    """A sentence among the words around it: `words` are the context before it, its own
    words (`words[first : first + count]`), then the context after it."""

    words: list
    first: int
    count: int

    def labels(self, tags):
        """Label ids of `words` for `tags` (the sentence's): IGNORE_LABEL on context words."""
        return [IGNORE_LABEL] * self.first + [LABELS.index(t) for t in tags] + [IGNORE_LABEL] * self.after

    @property
    def after(self):
        return len(self.words) - self.first - self.count


def read_conll(path, scheme="iob2"):
    """Sentences of a CoNLL-2003 file (`token POS chunk NER` per line, blank lines
    between sentences, `-DOCSTART-` lines between documents). Tags are converted from
    the file's IOB1 to IOB2 unless `scheme="iob1"`."""
    path = Path(path)
    text = read_text(path, "CoNLL")
    sentences, words, tags = [], [], []
    document = 0  # each -DOCSTART- line after a sentence starts the next one

    def flush():
        if words:
            converted = iob1_to_iob2(tags) if scheme == "iob2" else list(tags)
            sentences.append(Sentence(list(words), converted, document))
            words.clear()
            tags.clear()

    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split()
        if not fields:
            flush()
            continue
        if fields[0] == "-DOCSTART-":
            flush()
            if sentences and sentences[-1].document == document:
                document += 1
            continue
        if len(fields) != 4:
            raise ValueError(
                f"{path}:{number}: malformed line: {len(fields)} columns, expected 4 (token POS chunk NER)"
            )
        tag = fields[3]
        if tag != "O" and (tag[:2] not in ("B-", "I-") or len(tag) < 3):
            raise ValueError(f"{path}:{number}: NER tag {tag!r} is not O, B-TYPE or I-TYPE")
        words.append(fields[0])
        tags.append(tag)
    flush()
    return sentences


def document_context(sentences, tokenizer, max_seq_length):
    """Each sentence as an `InContext`: among as many words of its document as fit with
    it in `max_seq_length` pieces (with [CLS] and [SEP]), added one word at a time before
    and after it in turn, so it sits near the middle; a side stops at its first word
    that does not fit, or at the document's edge. A sentence that alone does not fit
    gets no context."""
    words = [word for sentence in sentences for word in sentence.words]
    counts = tokenizer(tf.constant(words, tf.string)).row_lengths().numpy() if words else np.zeros(0, "int64")
    ends = np.cumsum([len(sentence.words) for sentence in sentences], dtype="int64")
    starts = ends - [len(sentence.words) for sentence in sentences]
    budget = max_seq_length - 2
    contexts = []
    for _, group in itertools.groupby(range(len(sentences)), key=lambda i: sentences[i].document):
        group = list(group)
        document_start, document_end = starts[group[0]], ends[group[-1]]
        for index in group:
            left, right = starts[index], ends[index]
            room = budget - counts[left:right].sum()
            grow_left = grow_right = room >= 0
            while grow_left or grow_right:
                grow_left = grow_left and left > document_start and counts[left - 1] <= room
                if grow_left:
                    left -= 1
                    room -= counts[left]
                grow_right = grow_right and right < document_end and counts[right] <= room
                if grow_right:
                    room -= counts[right]
                    right += 1
            contexts.append(InContext(words[left:right], int(starts[index] - left), len(sentences[index].words)))
    return contexts


def training_examples(sentences, contexts=None):
    """(word lists, label id lists) to train on: the sentences, or with `contexts`
    (`document_context(sentences, ...)`) each sentence among its context words, which
    are labelled IGNORE_LABEL."""
    if contexts is None:
        return [s.words for s in sentences], [[LABELS.index(t) for t in s.tags] for s in sentences]
    return [c.words for c in contexts], [c.labels(s.tags) for c, s in zip(contexts, sentences, strict=True)]


def iob1_to_iob2(tags):
    """IOB1 (B- only between adjacent entities of one type) -> IOB2 (every entity
    starts with B-)."""
    converted = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            previous = tags[i - 1] if i else "O"
            if previous == "O" or previous[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        converted.append(tag)
    return converted


# --- conlleval ------------------------------------------------------------------------


def _split(tag):
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def _end_of_chunk(prev_tag, tag, prev_type, type_):
    """conlleval's endOfChunk (plus single-token S- chunks)."""
    return (
        (prev_tag in ("B", "I") and tag in ("B", "O", "S"))
        or (prev_tag == "E" and tag in ("E", "I", "O", "B", "S"))
        or prev_tag == "S"
        or (prev_tag not in ("O", ".") and prev_type != type_)
    )


def _start_of_chunk(prev_tag, tag, prev_type, type_):
    """conlleval's startOfChunk (plus single-token S- chunks)."""
    return (
        (prev_tag in ("B", "I", "O", "E", "S") and tag in ("B", "S"))
        or (prev_tag in ("O", "E", "S") and tag in ("I", "E"))
        or (tag not in ("O", ".") and prev_type != type_)
    )


def _count_chunks(gold_tags, guessed_tags, correct_chunks, found_gold, found_guessed):
    """Adds one sentence's correct, gold and guessed chunks per type to the counts."""
    in_correct = False
    last_gold, last_gold_type, last_guess, last_guess_type = "O", "", "O", ""
    for gold, guess in zip(list(gold_tags) + ["O"], list(guessed_tags) + ["O"]):  # "O": the boundary
        gold_tag, gold_type = _split(gold)
        guess_tag, guess_type = _split(guess)
        gold_end = _end_of_chunk(last_gold, gold_tag, last_gold_type, gold_type)
        guess_end = _end_of_chunk(last_guess, guess_tag, last_guess_type, guess_type)
        if in_correct:
            if gold_end and guess_end and last_guess_type == last_gold_type:
                in_correct = False
                correct_chunks[last_gold_type] = correct_chunks.get(last_gold_type, 0) + 1
            elif gold_end != guess_end or guess_type != gold_type:
                in_correct = False
        gold_start = _start_of_chunk(last_gold, gold_tag, last_gold_type, gold_type)
        guess_start = _start_of_chunk(last_guess, guess_tag, last_guess_type, guess_type)
        if gold_start and guess_start and guess_type == gold_type:
            in_correct = True
        if gold_start:
            found_gold[gold_type] = found_gold.get(gold_type, 0) + 1
        if guess_start:
            found_guessed[guess_type] = found_guessed.get(guess_type, 0) + 1
        last_gold, last_gold_type, last_guess, last_guess_type = gold_tag, gold_type, guess_tag, guess_type


def conlleval(gold_sentences, predicted_sentences):
    """Entity precision/recall/F1 (overall and per type) and token accuracy, computed
    as conlleval.pl does: a predicted entity counts only if its start, end and type all
    match a gold entity; sentence boundaries end entities."""
    correct_chunks, found_gold, found_guessed = {}, {}, {}
    tokens = correct_tokens = 0
    for gold_tags, guessed_tags in zip(gold_sentences, predicted_sentences, strict=True):
        if len(gold_tags) != len(guessed_tags):
            raise ValueError(f"sentence with {len(gold_tags)} gold tags got {len(guessed_tags)} predictions")
        _count_chunks(gold_tags, guessed_tags, correct_chunks, found_gold, found_guessed)
        tokens += len(gold_tags)
        correct_tokens += sum(g == p for g, p in zip(gold_tags, guessed_tags))

    result = precision_recall_f1(sum(correct_chunks.values()), sum(found_gold.values()), sum(found_guessed.values()))
    result["accuracy"] = correct_tokens / tokens if tokens else 0.0
    result["per_type"] = {
        kind: precision_recall_f1(correct_chunks.get(kind, 0), found_gold.get(kind, 0), found_guessed.get(kind, 0))
        for kind in sorted(set(found_gold) | set(found_guessed))
    }
    return result


# --- predictions ----------------------------------------------------------------------


def predict_tags(model, sentences, batch_size, contexts=None):
    """IOB2 tags per word: the argmax at each word's first piece ("O" for words cut by
    truncation or with no pieces). With `contexts` (`document_context(sentences, ...)`)
    each sentence is tagged among the words around it."""
    return predict_tags_and_confidences(model, sentences, batch_size, contexts)[0]


def predict_tags_and_confidences(model, sentences, batch_size, contexts=None):
    """`predict_tags`, and each tag's softmax probability (0 for the "O" of a word with no piece)."""
    words = tf.ragged.constant([c.words for c in contexts] if contexts else [s.words for s in sentences])
    dataset = tf.data.Dataset.from_tensor_slices(words).batch(batch_size).map(model.word_start_positions)
    predictions, confidences = [], []
    for packed, positions in dataset:
        probabilities = tf.nn.softmax(tf.cast(model.predict_on_batch(packed), tf.float32)).numpy()
        for row, row_positions in enumerate(positions.to_list()):
            tags, best = word_tags(probabilities[row], row_positions)
            predictions.append(tags)
            confidences.append(best)
    return sentence_tags(predictions, contexts), sentence_tags(confidences, contexts)


def word_tags(probabilities, positions):
    """(tags, their probabilities) of an example's words from its pieces' tag
    `probabilities` `[pieces, tags]`: each word's most probable tag at its first piece
    (`positions`; -1, a word with no piece: "O" at probability 0)."""
    labels, best = probabilities.argmax(axis=-1), probabilities.max(axis=-1)
    tags = [LABELS[labels[p]] if p >= 0 else "O" for p in positions]
    return tags, [float(best[p]) if p >= 0 else 0.0 for p in positions]


def sentence_tags(predictions, contexts=None):
    """Tags predicted for the examples (`training_examples`' words) -> each sentence's:
    with `contexts`, its own words' tags without the context's."""
    if contexts:
        return [tags[c.first : c.first + c.count] for tags, c in zip(predictions, contexts, strict=True)]
    return predictions


def write_predictions(path, sentences, predicted):
    """conlleval's input format: `word gold predicted` per line, a blank line after each sentence."""
    with open(path, "w", encoding="utf-8") as out:
        for sentence, tags in zip(sentences, predicted):
            out.writelines(f"{w} {g} {p}\n" for w, g, p in zip(sentence.words, sentence.tags, tags))
            out.write("\n")


# --- training and scoring runs ---------------------------------------------------------


def tagging_batches(sentences, batch_size, seed, contexts=None):
    """Raw training batches of (words, tag ids per word) for `fit` (`training_examples`:
    with `contexts`, each sentence among its unlabelled context words): shuffled, of
    examples of similar lengths (`length_grouped_batches`)."""
    word_lists, label_lists = training_examples(sentences, contexts)
    words = tf.ragged.constant(word_lists)
    labels = tf.ragged.constant(label_lists, dtype=tf.int32)
    lengths = np.array([sum(len(w) + 1 for w in word_list) for word_list in word_lists])
    return length_grouped_batches((words, labels), lengths, batch_size, shuffle=True, seed=seed)


def conll_scores(sentences, predicted):
    """conlleval's precision, recall, f1 and accuracy of `predicted` tags for `sentences`."""
    scores = conlleval([s.tags for s in sentences], predicted)
    return {name: scores[name] for name in ("precision", "recall", "f1", "accuracy")}


class ConllData(TaskData):
    """CoNLL-2003's `eng.train` and `eng.<eval_split>` of `data_dir` (the first
    `max_examples` sentences of each) for a `BertTokenClassifier`, scored by conlleval
    and kept by entity F1. With `document_context`, each sentence is read among the
    words around it in its document, up to `max_seq_length` pieces (`prepare`)."""

    labels = LABELS
    main_metric = "f1"

    def __init__(self, data_dir, eval_split="testa", max_examples=None, document_context=False, max_seq_length=None):
        self.train = read_conll(Path(data_dir) / "eng.train")[:max_examples]
        self.dev = read_conll(Path(data_dir) / f"eng.{eval_split}")[:max_examples]
        self.train_size, self.dev_size = len(self.train), len(self.dev)
        self.document_context, self.max_seq_length = document_context, max_seq_length
        self.train_contexts = self.dev_contexts = None
        self.predicted = self.confidences = None  # the last evaluation's tags and their probabilities

    def head_arguments(self):
        return {"num_classes": len(LABELS), "labels": LABELS}

    def prepare(self, model):
        if self.document_context:
            tokenizer = model.preprocessor.tokenizer
            self.train_contexts = document_context(self.train, tokenizer, self.max_seq_length)
            self.dev_contexts = document_context(self.dev, tokenizer, self.max_seq_length)

    def training_texts(self):
        return [" ".join(words) for words in training_examples(self.train, self.train_contexts)[0]]

    def train_batches(self, batch_size, seed):
        return tagging_batches(self.train, batch_size, seed, self.train_contexts)

    def evaluate(self, model, batch_size):
        return self.score(*predict_tags_and_confidences(model, self.dev, batch_size, self.dev_contexts))

    def score(self, predicted, confidences):
        """conlleval of tags `predicted` for the dev sentences; they and their
        probabilities (`confidences`) are kept for `write_predictions` and `report`."""
        self.predicted, self.confidences = predicted, confidences
        return conll_scores(self.dev, predicted)

    def write_predictions(self, output_dir):
        """The last evaluation's tags as `word gold predicted` lines, `predictions.txt`."""
        write_predictions(Path(output_dir) / "predictions.txt", self.dev, self.predicted)

    def report(self):
        """conlleval's precision, recall and F1 of each entity type in the last evaluation,
        and the sentences whose wrong tags it was surest of: their wrong words as
        `word/TAG`, gold and predicted, a sentence's confidence its surest wrong tag's."""
        per_type = conlleval([s.tags for s in self.dev], self.predicted)["per_type"]
        texts, gold, predicted, confidence = [], [], [], []
        for sentence, tags, probabilities in zip(self.dev, self.predicted, self.confidences, strict=True):
            wrong = [i for i, (g, p) in enumerate(zip(sentence.tags, tags)) if g != p]
            texts.append(" ".join(sentence.words))
            gold.append(" ".join(f"{sentence.words[i]}/{sentence.tags[i]}" for i in wrong))
            predicted.append(" ".join(f"{sentence.words[i]}/{tags[i]}" for i in wrong))
            confidence.append(max((probabilities[i] for i in wrong), default=0.0))
        return EvaluationReport(
            list(per_type), per_type, None, most_confident_errors(texts, gold, predicted, confidence)
        )

"""A head's answers as records, one a row: the outputs of its `ServingSignature` (the
same decoding its SavedModel export serves) in their natural form, with character
offsets into the input text where the signature gives bytes or words."""

import numpy as np


def head_kind(model):
    """What `model` answers (its class's `head_kind`): one of the kinds `RECORDS` decodes."""
    kind = getattr(model, "head_kind", None)
    if kind not in RECORDS:
        raise ValueError(f"predict does not answer for a {type(model).__name__} yet")
    return kind


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _names(labels, count):
    return list(labels) if labels else [str(i) for i in range(count)]


def records(kind, outputs, texts, labels=None, all_scores=False):
    """The record of each row of one batch: `outputs` the signature's numpy outputs,
    `texts` each row's texts (segment -> text), `labels` the class or tag names."""
    return [RECORDS[kind](outputs, row, texts[row], labels, all_scores) for row in range(len(texts))]


def classifier_record(outputs, row, texts, labels, all_scores):
    probabilities = outputs["probabilities"][row]
    names = _names(labels, len(probabilities))
    best = int(outputs["label_ids"][row])
    record = {"label": names[best], "probability": float(probabilities[best])}
    if all_scores:
        record["scores"] = {name: float(p) for name, p in zip(names, probabilities)}
    return record


def multi_label_record(outputs, row, texts, labels, all_scores):
    probabilities = outputs["probabilities"][row]
    names = _names(labels, len(probabilities))
    record = {"labels": [name for name, yes in zip(names, outputs["predicted"][row]) if yes]}
    record["scores"] = {name: float(p) for name, p in zip(names, probabilities)}
    return record


def score_record(key):
    return lambda outputs, row, texts, labels, all_scores: {"score": float(outputs[key][row])}


def embedder_record(outputs, row, texts, labels, all_scores):
    return {"embedding": np.asarray(outputs["embeddings"][row], np.float32).tolist()}


def tagger_record(outputs, row, texts, labels, all_scores):
    """Per-word tags with character offsets, and the entities their IOB2 tags make."""
    (text,) = texts.values()
    words, position = [], 0
    tags = outputs["tags"][row] if "tags" in outputs else outputs["tag_ids"][row]
    for index in range(int(outputs["num_words"][row])):
        word = _text(outputs["words"][row][index])
        start = text.find(word, position)
        end = None if start < 0 else start + len(word)
        position = position if end is None else end
        words.append(
            {
                "word": word,
                "tag": _text(tags[index]),
                "start": None if start < 0 else start,
                "end": end,
                "score": float(outputs["tag_probabilities"][row][index]),
            }
        )
    return {"words": words, "entities": entities(words, text)}


def entities(words, text):
    """IOB2 words -> entities: a B- tag (or an I- tag of another type) starts one, I- of
    the same type goes on; the text between the first word's start and the last one's end."""
    found = []
    for word in words:
        prefix, _, kind = word["tag"].partition("-")
        if prefix not in ("B", "I") or not kind or word["start"] is None:
            found.append(None)
            continue
        current = found[-1] if found else None
        if prefix == "I" and current is not None and current["entity"] == kind:
            current["end"], current["scores"] = word["end"], [*current["scores"], word["score"]]
        else:
            found.append({"entity": kind, "start": word["start"], "end": word["end"], "scores": [word["score"]]})
    spans = [entity for entity in found if entity is not None]
    return [
        {
            "entity": e["entity"],
            "text": text[e["start"] : e["end"]],
            "start": e["start"],
            "end": e["end"],
            "score": float(np.mean(e["scores"])),
        }
        for e in spans
    ]


def span_record(outputs, row, texts, labels, all_scores):
    """The answer with character offsets into the context."""
    context = texts[list(texts)[-1]].encode("utf-8")
    start_byte, end_byte = int(outputs["answer_start_byte"][row]), int(outputs["answer_end_byte"][row])
    start = len(context[:start_byte].decode("utf-8", errors="ignore"))
    return {
        "answer": _text(outputs["answer"][row]),
        "start": start,
        "end": start + len(context[start_byte:end_byte].decode("utf-8", errors="ignore")),
        "score": float(outputs["score"][row]),
        "no_answer_score": float(outputs["no_answer_score"][row]),
    }


def choice_record(outputs, row, texts, labels, all_scores):
    """The best choice (index and text) and each choice's probability."""
    best = int(outputs["choice"][row])
    return {
        "choice": best,
        "choice_text": texts[list(texts)[-1]][best],
        "probabilities": [float(p) for p in outputs["probabilities"][row]],
    }


def fill_mask_record(outputs, row, texts, labels, all_scores):
    """Each literal [MASK]'s top-k fillers, in the order of the masks in the text."""
    masks = []
    for index, position in enumerate(outputs["mask_positions"][row]):
        if position < 0:
            continue
        tokens = [_text(token) for token in outputs["top_tokens"][row][index]]
        probabilities = [float(p) for p in outputs["top_probabilities"][row][index]]
        masks.append({"position": int(position), "tokens": tokens, "probabilities": probabilities})
    return {"masks": masks}


RECORDS = {
    "classifier": classifier_record,
    "multi-label": multi_label_record,
    "regression": score_record("score"),
    "reranker": score_record("scores"),
    "embedder": embedder_record,
    "tagger": tagger_record,
    "span": span_record,
    "multiple-choice": choice_record,
    "fill-mask": fill_mask_record,
}

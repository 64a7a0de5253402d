"""bench/bench_long.py's task, checked against the SQuAD file read here on its own: labels
against the questions' own paragraphs and gold answers, disjoint articles, lengths."""

import collections
import json

import pytest
from conftest import DATA, require

from bench.bench_long import long_documents, split
from bert_keras.datasets.squad import read_squad

SQUAD = DATA / "squad" / "dev-v1.1.json"
PARAGRAPHS = 4


@pytest.fixture(scope="module")
def squad():
    path = require(SQUAD)
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    owner = {}  # qas id -> (article, paragraph index, answers)
    for a, article in enumerate(data):
        for p, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                owner[qa["id"]] = (a, p, qa["answers"])
    return data, owner, read_squad(path)


@pytest.fixture(scope="module", params=[False, True], ids=["same-article", "other-article"])
def other_articles(request):
    return request.param


@pytest.fixture(scope="module")
def documents(squad, other_articles):
    return split(squad[2], range(0, 36), range(36, 48), 300, 200, PARAGRAPHS, seed=0, other_articles=other_articles)


def test_labels_follow_the_squad_answers(squad, documents, other_articles):
    data, owner, _ = squad
    for document in documents[0] + documents[1]:
        a, p, answers = owner[document.qas_id]
        own = data[a]["paragraphs"][p]["context"]
        source = document.source_article
        texts = [paragraph["context"] for paragraph in data[source]["paragraphs"]]
        assert document.article == a and len(document.paragraphs) == PARAGRAPHS
        assert (source != a) == other_articles
        others = list(document.paragraphs)
        if document.label:
            assert others.pop(document.answer_position) == own
            answer = answers[0]
            assert own[answer["answer_start"] :][: len(answer["text"])] == answer["text"]
        else:
            assert document.answer_position == -1 and own not in others
            joined = document.document.lower()
            assert not any(answer["text"].lower() in joined for answer in answers)
        # The other paragraphs: distinct, consecutive in their article once the question's own is left out.
        rest = [text for text in texts if text != own]
        first = rest.index(others[0])
        assert others == rest[first : first + len(others)]


def test_articles_are_disjoint_and_labels_balanced(documents):
    train, held_out = documents
    for part, articles in ((train, set(range(36))), (held_out, set(range(36, 48)))):
        assert {d.article for d in part} | {d.source_article for d in part} <= articles
    assert len(train) == 300 and len(held_out) == 200
    assert not {d.qas_id for d in train} & {d.qas_id for d in held_out}
    for part in documents:
        assert collections.Counter(d.label for d in part) == {1: len(part) // 2, 0: len(part) // 2}
    # The answer paragraph is anywhere in the document, each position about as often.
    positions = collections.Counter(d.answer_position for d in train if d.label)
    assert set(positions) == set(range(PARAGRAPHS))
    assert min(positions.values()) > 0.6 * 150 / PARAGRAPHS


def test_documents_need_several_windows(documents):
    # Each word is at least one WordPiece piece: most documents need 3+ windows of 128.
    words = [len(d.document.split()) for d in documents[0] + documents[1]]
    assert sum(n > 2 * 128 for n in words) >= 0.95 * len(words)


def test_same_seed_same_documents(squad, documents, other_articles):
    again = long_documents(squad[2], range(0, 36), 300, PARAGRAPHS, seed=0, other_articles=other_articles)
    assert again == documents[0]
    other = long_documents(squad[2], range(0, 36), 300, PARAGRAPHS, seed=1, other_articles=other_articles)
    assert [d.qas_id for d in other] != [d.qas_id for d in again]


def test_bad_splits_are_refused(squad):
    examples = squad[2]
    with pytest.raises(ValueError, match="disjoint; both hold \\[35\\]"):
        split(examples, range(0, 36), range(35, 48), 10, 10, PARAGRAPHS, seed=0)
    with pytest.raises(ValueError, match="no SQuAD question in articles \\[48\\]"):
        long_documents(examples, range(48, 49), 10, PARAGRAPHS, seed=0)
    # Article 16 has 21 paragraphs: documents of 21 leave none outside them for a negative.
    with pytest.raises(ValueError, match="article 16 has 21 paragraphs, too few for documents of 21"):
        long_documents(examples, [16], 10, 21, seed=0)
    with pytest.raises(ValueError, match="give only"):
        long_documents(examples, [16], 10_000, PARAGRAPHS, seed=0)
    with pytest.raises(ValueError, match="need two articles or more, got \\[16\\]"):
        long_documents(examples, [16], 10, PARAGRAPHS, seed=0, other_articles=True)

"""CoNLL-2003: the real files parse completely, IOB1 -> IOB2, conlleval scores on
hand-computed cases, first-piece labels, and a tiny `finetune conll` run."""

import json

import pytest
from conftest import DATA, require
from harness import check_tagger_breakdown

from bert_keras.datasets.conll import LABELS, conlleval, iob1_to_iob2, read_conll
from bert_keras_cli.cli import main as cli

CONLL = DATA / "conll2003"


@pytest.mark.parametrize("split, sentences, tokens", [("train", 14041, 203621), ("testa", 3250, 51362)])
def test_reader_parses_every_sentence_of_the_real_files(split, sentences, tokens):
    data = read_conll(require(CONLL / f"eng.{split}"))
    assert len(data) == sentences
    assert sum(len(s.words) for s in data) == tokens
    assert all(len(s.words) == len(s.tags) for s in data)
    assert {t for s in data for t in s.tags} == set(LABELS)


def test_first_sentences_and_iob2_conversion_on_the_real_file():
    data = read_conll(require(CONLL / "eng.testa"))
    assert data[0].words[:4] == ["CRICKET", "-", "LEICESTERSHIRE", "TAKE"]
    assert data[0].tags[:4] == ["O", "O", "B-ORG", "O"]  # I-ORG in the IOB1 file
    assert data[2].words[:5] == ["West", "Indian", "all-rounder", "Phil", "Simmons"]
    assert data[2].tags[:5] == ["B-MISC", "I-MISC", "O", "B-PER", "I-PER"]
    raw = read_conll(CONLL / "eng.testa", scheme="iob1")
    assert raw[2].tags[:5] == ["I-MISC", "I-MISC", "O", "I-PER", "I-PER"]


def test_iob1_to_iob2():
    # IOB1 uses B- only where an entity directly follows one of the same type.
    assert iob1_to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG"]) == [
        "B-PER",
        "I-PER",
        "B-PER",
        "O",
        "B-LOC",
        "B-ORG",
        "I-ORG",
    ]


def test_reader_reports_malformed_lines(tmp_path):
    path = tmp_path / "eng.bad"
    path.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP\n")
    with pytest.raises(ValueError, match=r"eng.bad:4: malformed line: 3 columns, expected 4"):
        read_conll(path)
    path.write_text("EU NNP I-NP ORG\n")
    with pytest.raises(ValueError, match=r"eng.bad:1: NER tag 'ORG'"):
        read_conll(path)
    # No final newline, documents and blank lines only separate sentences.
    path.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\n\n\n-DOCSTART- -X- O O\nPeter NNP I-NP I-PER")
    assert [(s.words, s.tags) for s in read_conll(path)] == [(["EU"], ["B-ORG"]), (["Peter"], ["B-PER"])]


def test_conlleval_on_hand_computed_cases():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG", "O", "B-MISC"]]
    guess = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "O", "O", "B-MISC"]]
    # Gold chunks: PER, LOC, ORG(3 tokens), MISC = 4. Guessed: PER, ORG, ORG(2 tokens), MISC = 4.
    # Correct: PER and MISC (the 2-token ORG ends too early) = 2.
    result = conlleval(gold, guess)
    assert result["precision"] == pytest.approx(2 / 4)
    assert result["recall"] == pytest.approx(2 / 4)
    assert result["f1"] == pytest.approx(0.5)
    assert result["accuracy"] == pytest.approx(7 / 9)
    assert result["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert result["per_type"]["ORG"]["precision"] == 0.0 and result["per_type"]["LOC"]["recall"] == 0.0

    # A guessed chunk that runs past the gold one is wrong; 1 gold, 2 guessed, 0 correct.
    result = conlleval([["B-PER", "O", "O"]], [["B-PER", "I-PER", "B-LOC"]])
    assert (result["precision"], result["recall"], result["f1"]) == (0.0, 0.0, 0.0)

    # conlleval is lenient: I- after O (or after another type) starts a chunk.
    result = conlleval([["B-LOC", "I-LOC", "O", "B-PER"]], [["I-LOC", "I-LOC", "O", "I-PER"]])
    assert result["f1"] == 1.0

    # A sentence boundary ends a chunk: two gold PER chunks, one per sentence.
    result = conlleval([["O", "B-PER"], ["I-PER", "O"]], [["O", "B-PER"], ["B-PER", "O"]])
    assert result["precision"] == 1.0 and result["recall"] == 1.0

    # 3 gold, 2 guessed, 1 correct: P 1/2, R 1/3, F1 2PR/(P+R) = 0.4.
    result = conlleval([["B-PER", "O", "B-LOC", "O", "B-ORG"]], [["B-PER", "O", "B-PER", "O", "O"]])
    assert result["precision"] == pytest.approx(0.5) and result["recall"] == pytest.approx(1 / 3)
    assert result["f1"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="2 gold tags got 1"):
        conlleval([["O", "O"]], [["O"]])


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags", [[], ["--doc-stride", "6", "--max-seq-length", "16", "--document-context"]], ids=["plain", "windows"]
)
def test_finetune_conll_end_to_end_tiny(tmp_path, capsys, flags):
    import keras

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.datasets.conll import document_context, predict_tags

    vocab = require(DATA / "vocab" / "vocab.txt")
    data = tmp_path / "conll"
    data.mkdir()
    for split, lines in (("train", 60), ("testa", 40)):
        text = require(CONLL / f"eng.{split}").read_text().splitlines()[:lines]
        (data / f"eng.{split}").write_text("\n".join(text) + "\n")
    init = tmp_path / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(init)
    out = tmp_path / "run"
    assert (
        cli(
            [
                "finetune",
                "conll",
                "--data-dir",
                str(data),
                "--output-dir",
                str(out),
                "--init",
                str(init),
                "--vocab",
                str(vocab),
                "--batch-size",
                "4",
                "--epochs",
                "1",
                "--verbose",
                "0",
                *flags,
            ]
        )
        == 0
    )
    assert "CoNLL-2003: " in capsys.readouterr().out
    history = json.loads((out / "eval_results.json").read_text())
    gold = read_conll(data / "eng.testa")
    # predictions.txt is `word gold predicted` of the kept model, a blank line after each sentence.
    model = keras.saving.load_model(out / "best.keras")
    contexts = None
    if flags:  # the flags reach the model and the data
        assert model.doc_stride == 6 and model.preprocessor.packer.max_seq_length == 16
        contexts = document_context(gold, model.preprocessor.tokenizer, 16)
        assert any(len(c.words) > c.count for c in contexts)
    predicted = predict_tags(model, gold, 64, contexts)
    expected = "".join(
        "".join(f"{w} {g} {p}\n" for w, g, p in zip(s.words, s.tags, tags)) + "\n" for s, tags in zip(gold, predicted)
    )
    assert (out / "predictions.txt").read_text() == expected
    assert all(tag in LABELS for tags in predicted for tag in tags)
    # The reported scores are conlleval's on those predictions.
    scores = conlleval([s.tags for s in gold], predicted)
    assert {k: history[0][k] for k in ("precision", "recall", "f1", "accuracy")} == pytest.approx(
        {k: scores[k] for k in ("precision", "recall", "f1", "accuracy")}
    )
    check_tagger_breakdown(out, gold, predicted, best_epoch=1)


def test_reader_numbers_documents_at_docstart_lines(tmp_path):
    path = tmp_path / "eng.docs"
    path.write_text(
        "EU NNP I-NP I-ORG\n\n-DOCSTART- -X- O O\n\nPeter NNP I-NP I-PER\n\nsaid VBD I-VP O\n\n"
        "-DOCSTART- -X- O O\n\n-DOCSTART- -X- O O\n\nBonn NNP I-NP I-LOC\n"
    )
    # Sentences before the first -DOCSTART- are a document; an empty document takes no number.
    assert [(s.words, s.document) for s in read_conll(path)] == [
        (["EU"], 0),
        (["Peter"], 1),
        (["said"], 1),
        (["Bonn"], 2),
    ]
    assert read_conll(require(CONLL / "eng.testa"))[-1].document == 215  # the dev set's 216 documents


def test_document_context_on_the_real_dev_set():
    from bert_keras import BertTokenizer
    from bert_keras.datasets.conll import IGNORE_LABEL, document_context, training_examples

    tokenizer = BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")))
    sentences = read_conll(require(CONLL / "eng.testa"))
    max_seq_length = 64
    contexts = document_context(sentences, tokenizer, max_seq_length)
    documents = {}
    offsets = []  # each sentence's first word in its document's words
    for sentence in sentences:
        words = documents.setdefault(sentence.document, [])
        offsets.append(len(words))
        words.extend(sentence.words)
    pieces = {word: len(ids) for word, ids in zip(documents[0], tokenizer(tf_strings(documents[0])).to_list())}
    grew = 0
    for sentence, context, offset in zip(sentences, contexts, offsets):
        document = documents[sentence.document]
        start = offset - context.first
        # The sentence among a contiguous run of words of its own document.
        assert context.words == document[start : start + len(context.words)]
        assert context.words[context.first : context.first + context.count] == sentence.words
        grew += len(context.words) > len(sentence.words)
        if sentence.document == 0:  # pieces counted independently on the first document
            used = sum(pieces[w] for w in context.words)
            assert used <= max_seq_length - 2 or context.words == sentence.words
            end = start + len(context.words)
            # Full: neither neighbour still fits (or the document ends there).
            for neighbour in (start - 1, end):
                if 0 <= neighbour < len(document) and used <= max_seq_length - 2:
                    assert pieces[document[neighbour]] > max_seq_length - 2 - used
    assert grew > 0.9 * len(sentences)
    words, labels = training_examples(sentences, contexts)
    for sentence, context, row, label_row in zip(sentences, contexts, words, labels):
        assert row == context.words
        assert label_row[: context.first] == [IGNORE_LABEL] * context.first
        assert label_row[context.first + context.count :] == [IGNORE_LABEL] * (len(row) - context.first - context.count)
        assert [LABELS[i] for i in label_row[context.first : context.first + context.count]] == sentence.tags
    assert training_examples(sentences[:2]) == (
        [s.words for s in sentences[:2]],
        [[LABELS.index(t) for t in s.tags] for s in sentences[:2]],
    )


def test_document_context_is_balanced_and_leaves_long_sentences_alone():
    from bert_keras import BertTokenizer
    from bert_keras.datasets.conll import Sentence, document_context

    tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b"])
    words = ["a", "b", "a", "bb", "a", "b", "a", "b", "a"]  # "bb": b ##b, 2 pieces
    sentences = [Sentence(words[:4], ["O"] * 4), Sentence(words[4:6], ["O"] * 2), Sentence(words[6:], ["O"] * 3)]
    sentences.append(Sentence(["a"], ["O"], document=1))
    # 6 pieces of room: "a b" (2), then in turn bb (left, 2), a (right), a (left); the next
    # right word, b, no longer fits.
    contexts = document_context(sentences, tokenizer, 8)
    assert (contexts[1].words, contexts[1].first, contexts[1].count) == (words[2:7], 2, 2)
    # The other document's sentence gets nothing from this one.
    assert (contexts[3].words, contexts[3].first) == (["a"], 0)
    # At the document's start only the right side grows; a sentence longer than the
    # room (5 pieces in 4) gets no context.
    assert (contexts[0].words, contexts[0].first) == (words[:5], 0)
    assert document_context(sentences, tokenizer, 6)[0].words == words[:4]


def tf_strings(words):
    import tensorflow as tf

    return tf.constant(words)

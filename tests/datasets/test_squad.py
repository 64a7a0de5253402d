"""SQuAD: windows and decoding recover the gold answers of the whole v1.1 dev file from
gold positions; max-context windows, n-best rules and v2.0 null answers on crafted
cases; EM/F1 as the official scripts define them, on hand-computed cases."""

import numpy as np
import pytest
from conftest import DATA, require

from bert_keras import BertTokenizer
from bert_keras.datasets.squad import Example, _max_context_window, make_features, read_squad
from bert_keras.datasets.squad_scoring import decode, evaluate, exact_match, f1_score, normalize_answer
from bert_keras_cli.finetune.squad import parse_slice


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require(DATA / "vocab" / "vocab.txt")))


def gold_logits(features):
    """Logits that pick exactly the labelled span in every window that holds it."""
    starts = np.full(features.input_word_ids.shape, -10.0, "float32")
    ends = starts.copy()
    rows = np.nonzero(features.start_positions > 0)[0]
    starts[rows, features.start_positions[rows]] = 10.0
    ends[rows, features.end_positions[rows]] = 10.0
    return starts, ends


@pytest.mark.slow
def test_gold_positions_recover_the_gold_answers_of_the_whole_dev_file(tokenizer):
    examples = read_squad(require(DATA / "squad" / "dev-v1.1.json"))
    assert len(examples) == 10570
    features = make_features(examples, tokenizer)  # 384 / 128 / 64
    assert features.input_word_ids.shape == (len(features), 384) and len(features) > len(examples)
    starts, ends = gold_logits(features)
    # Every answer of the dev file fits in 64 tokens; with that limit the only miss is an
    # answer that starts inside a word: "four" marked inside "fourth" by all three annotators,
    # which no WordPiece-level model can output.
    predictions, _, _ = decode(examples, features, starts, ends, max_answer_length=64)
    missed = {
        e.qas_id: predictions[e.qas_id]
        for e in examples
        if not max(exact_match(predictions[e.qas_id], a["text"]) for a in e.answers)
    }
    assert list(missed.values()) == ["fourth"]
    assert evaluate(examples, predictions)["exact_match"] == pytest.approx(100 * 10569 / 10570)
    # The original's max_answer_length of 30 also drops the one longer (36-token) answer.
    predictions, _, _ = decode(examples, features, starts, ends)
    assert evaluate(examples, predictions)["exact_match"] == pytest.approx(100 * 10568 / 10570)


def test_articles_slice_for_the_benchmark_split():
    path = require(DATA / "squad" / "dev-v1.1.json")
    first, rest = read_squad(path, parse_slice("0:36")), read_squad(path, parse_slice("36:"))
    assert len(first) + len(rest) == 10570
    assert {e.article for e in first} == set(range(36)) and {e.article for e in rest} == set(range(36, 48))
    with pytest.raises(ValueError, match="article slice"):
        parse_slice("0-36")


def test_max_context_window_by_hand():
    # 10 tokens, windows (start, length) (0,6) (3,6) (6,4); score min(left, right) + 0.01 * length.
    # Token 4: 1.06 in both of the first two windows, the first wins the tie.
    np.testing.assert_array_equal(_max_context_window([(0, 6), (3, 6), (6, 4)], 10), [0, 0, 0, 0, 0, 1, 1, 1, 2, 2])


def crafted(tokenizer, **options):
    context = "one two three four five six seven eight nine ten"
    example = Example("q1", "which?", context, [{"text": "six seven", "answer_start": context.index("six")}])
    return example, make_features([example], tokenizer, **options)


def test_windows_layout_and_labels(tokenizer):
    example, features = crafted(tokenizer, max_seq_length=10, doc_stride=3, max_query_length=64)
    # "which?" -> which ? (2 tokens): windows hold 10 - 2 - 3 = 5 context tokens, 3 apart.
    assert len(features) == 3
    ids = features.input_word_ids[0].tolist()
    assert ids[:4] == [101, tokenizer.token_to_id("which"), tokenizer.token_to_id("?"), 102]
    assert ids[4:] == [tokenizer.token_to_id(w) for w in "one two three four five".split()] + [102]
    assert features.input_type_ids[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    # "six seven" (context tokens 5, 6) lies in window 1 (tokens 3-7) and window 2 (tokens 6-9)
    # only partly: labelled in window 1 at 4 + 2, 4 + 3; window 0 and 2 point at [CLS].
    assert features.start_positions.tolist() == [0, 6, 0] and features.end_positions.tolist() == [0, 7, 0]
    assert features.token_start[1][6] == example.context.index("six")
    assert features.token_end[1][7] == example.context.index(" eight")


def test_decoding_rules(tokenizer):
    example, features = crafted(tokenizer, max_seq_length=10, doc_stride=3, max_query_length=64)
    starts = np.zeros(features.input_word_ids.shape, "float32")
    ends = np.zeros_like(starts)
    # Windows hold context tokens 0-4, 3-7 and 6-9; max context: tokens 0-3 in window 0,
    # 4-6 in window 1, 7-9 in window 2 (see test_max_context_window_by_hand's rule).
    # Window 0: "four" (token 3, at 4 + 3) scores 5 + 5.
    starts[0, 7], ends[0, 7] = 5.0, 5.0
    # Window 2: "seven eight" would score 18, but starts at token 6, whose max-context
    # window is 1, so window 2 may not propose it.
    starts[2, 4], ends[2, 5] = 9.0, 9.0
    predictions, nbest, _ = decode([example], features, starts, ends, n_best_size=3)
    assert predictions == {"q1": "four"}
    assert nbest["q1"][0]["text"] == "four" and len(nbest["q1"]) <= 3
    assert sum(entry["probability"] for entry in nbest["q1"]) == pytest.approx(1.0)
    # A span longer than max_answer_length is never proposed.
    starts[:] = ends[:] = 0.0
    starts[0, 4], ends[0, 8] = 9.0, 9.0
    predictions, _, _ = decode([example], features, starts, ends, max_answer_length=4)
    assert predictions["q1"] != "one two three four five"
    predictions, _, _ = decode([example], features, starts, ends, max_answer_length=5)
    assert predictions["q1"] == "one two three four five"


def test_v2_null_answer_threshold(tokenizer):
    example, features = crafted(tokenizer, max_seq_length=10, doc_stride=3, max_query_length=64)
    starts = np.zeros(features.input_word_ids.shape, "float32")
    ends = np.zeros_like(starts)
    starts[:, 0], ends[:, 0] = 3.0, 3.0  # null score 6 in every window
    starts[0, 7], ends[0, 7] = 2.5, 2.5  # best span "four" scores 5
    predictions, _, odds = decode([example], features, starts, ends, version_2=True)
    assert predictions == {"q1": ""} and odds["q1"] == pytest.approx(1.0)
    predictions, _, _ = decode([example], features, starts, ends, version_2=True, null_score_diff_threshold=1.5)
    assert predictions == {"q1": "four"}


def test_normalisation_as_the_official_script():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("Anthem of an era") == "anthem of era"
    # Only ASCII punctuation is removed; an article is any \b-delimited a/an/the.
    assert normalize_answer("a\u2014b") == "\u2014b"
    assert normalize_answer("  An\tapple  ") == "apple"


def test_em_and_f1_by_hand():
    assert exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    # P = 1/2, R = 1: F1 = 2/3.
    assert f1_score("Denver Broncos", "Broncos") == pytest.approx(2 / 3)
    # [b, b, c] vs [b, c, c]: two tokens in common, P = R = 2/3.
    assert f1_score("a b b c", "b c c") == pytest.approx(2 / 3)
    # v1.1 scores two empty answers 0; v2.0 scores them 1 and one empty answer 0.
    assert f1_score("the", "a") == 0.0
    assert f1_score("the", "a", version_2=True) == 1.0
    assert f1_score("", "Paris", version_2=True) == 0.0


def test_evaluate_by_hand():
    examples = [
        Example("a", "q", "c", [{"text": "Denver Broncos", "answer_start": 0}, {"text": "Broncos", "answer_start": 7}]),
        Example("b", "q", "c", [{"text": "Paris", "answer_start": 0}]),
    ]
    # "a": EM 0, F1 max(2/3 vs "Denver Broncos" [P 1, R 1/2]... , 1 vs "Broncos")
    result = evaluate(examples, {"a": "the Broncos"})
    assert result["exact_match"] == pytest.approx(50.0)  # "b" has no prediction: counts 0
    assert result["f1"] == pytest.approx(50.0)
    result = evaluate(examples, {"a": "Denver", "b": "in Paris"})
    # a: F1 with "Denver Broncos" = 2 * 1 * 0.5 / 1.5 = 2/3; b: P 1/2, R 1 = 2/3.
    assert result["exact_match"] == 0.0 and result["f1"] == pytest.approx(100 * 2 / 3)
    v2 = [
        Example("n", "q", "c", [], is_impossible=True),
        Example("m", "q", "c", [{"text": "the", "answer_start": 0}, {"text": "Paris", "answer_start": 4}]),
    ]
    # Gold answers that normalise to "" are dropped (for "m": only "Paris" counts).
    result = evaluate(v2, {"n": "", "m": ""}, version_2=True)
    assert result == {"exact_match": 50.0, "f1": 50.0}


@pytest.mark.slow
def test_finetune_squad_end_to_end_tiny(tmp_path, capsys):
    import json

    import keras

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.datasets.squad import predict_logits
    from bert_keras_cli.cli import main as cli

    dev = str(require(DATA / "squad" / "dev-v1.1.json"))
    init = tmp_path / "encoder.keras"
    BertEncoder(BertConfig.preset("tiny", vocab_size=30522, num_hidden_layers=1)).save(init)
    out = tmp_path / "run"
    assert (
        cli(
            [
                "finetune",
                "squad",
                "--train-file",
                dev,
                "--train-articles",
                "0:1",
                "--predict-file",
                dev,
                "--predict-articles",
                "47:48",
                "--max-examples",
                "6",
                "--output-dir",
                str(out),
                "--init",
                str(init),
                "--vocab",
                str(DATA / "vocab" / "vocab.txt"),
                "--max-seq-length",
                "128",
                "--batch-size",
                "4",
                "--epochs",
                "1",
                "--verbose",
                "0",
            ]
        )
        == 0
    )
    assert "SQuAD v1.1: 6 training questions" in capsys.readouterr().out
    # predictions.json is the kept model's n-best decoding; the reported EM/F1 score it.
    model = keras.saving.load_model(out / "best.keras")
    examples = read_squad(dev, slice(47, 48))[:6]
    features = make_features(examples, model.preprocessor.tokenizer, max_seq_length=128)
    start_logits, end_logits = predict_logits(model, features, 64)
    expected, _, _ = decode(examples, features, start_logits, end_logits)
    predictions = json.loads((out / "predictions.json").read_text())
    assert predictions == expected and len(predictions) == 6
    metrics = json.loads((out / "best_metrics.json").read_text())
    assert {key: metrics[key] for key in ("exact_match", "f1")} == pytest.approx(evaluate(examples, predictions))

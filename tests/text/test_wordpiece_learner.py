"""`WordPieceLearner` against tf.text's learner itself (the reference), on real and synthetic counts."""

import random

import pytest
from conftest import SHARED
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as reference

from bert_keras.text import wordpiece_learner
from bert_keras.text.vocab import build_vocabulary, count_words, reserved_tokens

PRETRAINING = SHARED / "data" / "pretraining"

needs_data = pytest.mark.skipif(not PRETRAINING.exists(), reason=f"shared data folder {SHARED} is absent")


def assert_same(word_counts, vocab_size, reserved, **params):
    expected = reference.learn(list(word_counts.items()), vocab_size, reserved, **params)
    assert wordpiece_learner.learn(list(word_counts.items()), vocab_size, reserved, **params) == expected
    return expected


@pytest.fixture(scope="module")
def sample_counts():
    return count_words([str(PRETRAINING / "sample_text.txt")])


def book_counts(lines, tmp_path):
    """Word counts of the first `lines` lines of a Gutenberg book, normalised as the tokenizer does."""
    text = (PRETRAINING / "gutenberg" / "austen-emma.txt").read_text(encoding="utf-8").splitlines()[:lines]
    path = tmp_path / "part.txt"
    path.write_text("\n".join(text), encoding="utf-8")
    return count_words([str(path)])


@needs_data
@pytest.mark.parametrize("size", [40, 400])
def test_same_as_tf_text_on_sample_text(sample_counts, size):
    counts = sample_counts
    vocabulary = assert_same(counts, size, reserved_tokens(2), lower_thresh=1, upper_thresh=max(counts.values()) + 1)
    assert vocabulary[:7] == reserved_tokens(2)


@needs_data
def test_same_as_tf_text_on_a_book(tmp_path):
    counts = book_counts(500, tmp_path)
    assert len(counts) > 1000
    assert_same(counts, 1000, reserved_tokens(), lower_thresh=1, upper_thresh=max(counts.values()) + 1)


def synthetic_counts(rng, num_words, alphabet, max_length=12, max_count=50):
    """Words over a small alphabet, so that suffixes and prefixes are shared as in a language."""
    counts = {}
    while len(counts) < num_words:
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, max_length)))
        counts[word] = rng.choice([1, 1, 1, 2, 2, 3, 5, 8, rng.randint(1, max_count)])
    return counts


@pytest.mark.parametrize("seed", range(6))
def test_same_as_tf_text_on_synthetic_counts(seed):
    rng = random.Random(seed)
    alphabet = rng.choice(["abcdeéi", "abc", "xyzé漢字😀", "ab#[]K"])  # unicode; "#" and "[UNK]"-like words
    counts = synthetic_counts(rng, rng.choice([30, 300, 1000]), alphabet)
    counts.update({"[UNK]": 99, "[MASK]": 1, "##" + alphabet[:2]: 7, "#": 4})  # reserved words; "##x" as a word
    params = dict(
        lower_thresh=rng.choice([None, 1, 2, 10]),
        upper_thresh=rng.choice([None, 3, 40, int(1e7)]),
        max_token_length=rng.choice([50, 6]),  # longer words are dropped
        max_unique_chars=rng.choice([1000, 4]),  # words with other characters are dropped
        max_input_tokens=rng.choice([int(5e6), 100]),  # only the most frequent words are kept
        num_iterations=rng.choice([4, 1, 2]),
        slack_ratio=rng.choice([0.05, 0.0, 0.5]),
    )
    for size in (5, 60, 400, 100000):  # reserved only, small, large, beyond every threshold (search at its bound)
        assert_same(counts, size, reserved_tokens(1), **params)


def test_ties_and_single_threshold_search():
    counts = {"aa": 3, "ab": 3, "ba": 3, "bb": 3, "abab": 3, "baba": 3}  # every count ties
    for size in (8, 10, 14, 30):
        for lower, upper in ((1, 1), (3, 3), (1, 3), (5, 2)):  # lower >= upper: one threshold
            assert_same(counts, size, ["[PAD]"], lower_thresh=lower, upper_thresh=upper)


@needs_data
@pytest.mark.parametrize("size", [150, 300])
def test_build_vocabulary_is_tf_text_with_a_raised_floor(sample_counts, size):
    """`build_vocabulary` raises the learner's lower threshold until the vocabulary fits:
    the same answer as that loop on tf.text's learner."""
    counts = sample_counts
    for floor in range(1, 100):
        expected = reference.learn(
            list(counts.items()),
            size,
            reserved_tokens(),
            lower_thresh=floor,
            upper_thresh=max(counts.values()) + 1,
        )
        if len(expected) <= size:
            break
    assert floor == 2  # the floor loop ran
    assert build_vocabulary(counts, size) == expected


@needs_data
def test_a_size_below_every_threshold_is_a_clear_error(sample_counts):
    with pytest.raises(ValueError, match="Could not fit a vocabulary into 100 tokens"):
        build_vocabulary(sample_counts, 100)


def test_bad_counts_are_clear_errors():
    with pytest.raises(ValueError, match="empty"):
        wordpiece_learner.WordPieceLearner({}, [])
    with pytest.raises(ValueError, match="'b' has count 0"):
        wordpiece_learner.WordPieceLearner({"a": 2, "b": 0}, [])
    with pytest.raises(ValueError, match="'a' has count 1.5"):
        wordpiece_learner.WordPieceLearner({"a": 1.5}, [])
    with pytest.raises(ValueError, match="upper_thresh must be at least 1"):
        wordpiece_learner.learn({"a": 1}, 10, [], upper_thresh=0)


def test_a_word_under_every_threshold_still_changes_the_vocabulary():
    """Why word counts are never pruned: a word's suffixes add up with other words' ("##ing"),
    so a word counted once can lift a suffix over the threshold (in tf.text's learner too)."""
    params = reference.Params(
        upper_thresh=None, lower_thresh=None, num_iterations=4, max_input_tokens=-1, max_token_length=50,
        max_unique_chars=1000, vocab_size=100, slack_ratio=0.05, include_joiner_token=True, joiner="##",
        reserved_tokens=[],
    )  # fmt: skip
    counts = {"sing": 2, "ring": 2}
    rare = dict(counts, zing=1)
    assert "##ing" not in reference.learn_with_thresh(list(counts.items()), 5, params)
    assert "##ing" in reference.learn_with_thresh(list(rare.items()), 5, params)
    assert "##ing" in wordpiece_learner.WordPieceLearner(rare, []).vocabulary(5)
    assert "##ing" not in wordpiece_learner.WordPieceLearner(counts, []).vocabulary(5)

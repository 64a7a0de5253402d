"""tf.text's WordPiece vocabulary learner, the same output from the same counts, in numpy.

tf.text's `wordpiece_tokenizer_learner_lib.learn` binary-searches a count threshold; for
each threshold it runs 4 iterations that count every substring from each piece start of
every word, then walks those counts from the longest substring down, subtracting each
token's count from its prefixes. That subtraction telescopes: a substring keeps exactly
the count of the piece starts whose whole rest of the word it is (its suffix from there),
and every other substring ends at 0. So an iteration's tokens are the word suffixes
(`word` from a word's start, `##suffix` from inside it) whose piece starts' counts reach
the threshold, plus every single character (`c` and `##c`); and the next iteration's piece
starts are the greedy longest-match split of each word over those tokens.

`WordPieceLearner` makes the table of suffixes once (each word's suffixes, and at each of
them the longer prefixes that are also suffixes: the only tokens a greedy split can take
there). A threshold's iteration is then a few numpy passes over that table, shared by all
thresholds the search tries (and by `build_vocabulary`'s floor loop).
"""

from array import array

import numpy as np

JOINER = "##"


class WordPieceLearner:
    """The vocabularies tf.text's learner makes from `word_counts` ({word: count} or
    (word, count) pairs), with its defaults and `include_joiner_token=True, joiner="##"`.

    Counts must be positive integers (tf.text's threshold search then never tries a
    threshold below 1, the one case where substrings that are no suffix become tokens).
    """

    def __init__(
        self,
        word_counts,
        reserved_tokens,
        num_iterations=4,
        max_input_tokens=int(5e6),
        max_token_length=50,
        max_unique_chars=1000,
    ):
        pairs = list(word_counts.items() if isinstance(word_counts, dict) else word_counts)
        if not pairs:
            raise ValueError("No words to learn a vocabulary from: the word counts are empty.")
        counts = [count for _, count in pairs]
        bad = next((pair for pair in pairs if not isinstance(pair[1], (int, np.integer)) or pair[1] < 1), None)
        if bad is not None:
            raise ValueError(f"Word counts must be positive integers: {bad[0]!r} has count {bad[1]!r}.")
        self.max_count, self.min_count = max(counts), min(counts)
        self.reserved_tokens = list(reserved_tokens)
        self.num_iterations = num_iterations
        reserved = set(self.reserved_tokens)
        pairs = [(word, count) for word, count in pairs if len(word) <= max_token_length and word not in reserved]
        words, counts = _filter_input_words(pairs, max_unique_chars, max_input_tokens)
        self._build_tables(words, counts)
        self._sizes = {}

    def _build_tables(self, words, counts):
        """Units are (word, start) pairs, numbered word by word. A unit's key is the
        suffix from its start as a token string with its joiner flag (2 * string id +
        flag: "##x" is both the joiner form of x and a word that starts with ##)."""
        strings = {}
        unit_key, unit_count, unit_rest = array("q"), array("q"), array("q")  # rest: characters to the word's end
        chars = set()
        for word, count in zip(words, counts):
            chars.update(word)
            for start in range(len(word)):
                token = word if start == 0 else JOINER + word[start:]
                unit_key.append(2 * strings.setdefault(token, len(strings)) + (start > 0))
                unit_count.append(count)
                unit_rest.append(len(word) - start)
        self.char_tokens = sorted(chars)
        for char in self.char_tokens:  # every character is a token, c and ##c
            strings.setdefault(char, len(strings))
            strings.setdefault(JOINER + char, len(strings))
        self.strings = list(strings)
        # Sorted, the strings that start with a string s are a range: from s to prefix_end[s].
        ordered = sorted(self.strings)
        self.sorted_ids = np.fromiter((strings[t] for t in ordered), np.int64, len(ordered))
        self.prefix_end = np.empty(len(ordered), np.int64)
        self.prefix_end[self.sorted_ids] = _prefix_ends(ordered)
        self.string_lengths = np.fromiter(map(len, self.strings), np.int64, len(self.strings))
        self.rank = np.empty(len(ordered), np.int64)
        self.rank[self.sorted_ids] = np.arange(len(ordered))
        del ordered
        self.is_char = np.zeros(len(strings), bool)
        self.is_char[[strings[c] for c in self.char_tokens] + [strings[JOINER + c] for c in self.char_tokens]] = True
        self.unit_key = np.frombuffer(unit_key, np.int64)
        self.unit_count = np.frombuffer(unit_count, np.int64)
        self.unit_rest = np.frombuffer(unit_rest, np.int64)
        lengths = np.asarray([len(word) for word in words], np.int64)
        self.word_first_unit = (np.cumsum(lengths) - lengths)[lengths > 0]
        self.reserved_strings = np.asarray(sorted({strings.get(t, -1) for t in self.reserved_tokens} - {-1}), np.int64)
        self.reserved_new = len(set(self.reserved_tokens) - set(strings))
        self.suffix_counts = self._counts(np.arange(len(unit_key)))
        self.candidates_cut = None

    def _make_candidates(self, cut):
        """For each key, the tokens of at least 2 characters a greedy split may take at
        its units, longest first, among the strings that may be tokens at thresholds >=
        `cut` (a key's count in any iteration is at most its suffix count)."""
        frequent = (self.suffix_counts.reshape(-1, 2) >= cut).any(axis=1) | self.is_char
        token_ids = np.flatnonzero(frequent & (self.string_lengths >= 2))  # single characters: the fallback
        token_lengths = self.string_lengths[token_ids]
        low, high = self.rank[token_ids], self.prefix_end[token_ids]
        n = high - low
        owner = np.repeat(np.arange(len(token_ids)), n)
        strings = self.sorted_ids[np.arange(n.sum()) - np.repeat(np.cumsum(n) - n - low, n)]
        joined = token_lengths[owner] >= len(JOINER) + 2  # a suffix key (##...) takes tokens of 2+ characters after ##
        key = np.concatenate([2 * strings, 2 * strings[joined] + 1])
        step = np.concatenate([token_lengths[owner], token_lengths[owner[joined]] - len(JOINER)])
        token = np.concatenate([token_ids[owner], token_ids[owner[joined]]])
        used = self.suffix_counts[key] > 0
        key, step, token = key[used], step[used], token[used]
        order = np.lexsort((-step, key))
        self.cand_key, self.cand_step, self.cand_string = key[order], step[order], token[order]
        self.candidates_cut = cut

    def _counts(self, units):
        """Per key: the summed counts of `units` (the piece starts of an iteration)."""
        return np.bincount(self.unit_key[units], self.unit_count[units], minlength=2 * len(self.strings)).astype(
            np.int64
        )

    def _tokens(self, key_counts, thresh):
        """The iteration's tokens (a mask over strings) and their counts, as tf.text's
        `next_tokens` + `ensure_all_tokens_exist`: a key reaching `thresh`, the joiner
        form's count where both forms of a string do, else 1 for a character."""
        passed = (key_counts >= thresh).reshape(-1, 2)
        key_counts = key_counts.reshape(-1, 2)
        values = np.where(passed[:, 1], key_counts[:, 1], np.where(passed[:, 0], key_counts[:, 0], 1))
        return passed[:, 0] | passed[:, 1] | self.is_char, values

    def _piece_starts(self, selected):
        """The units at which tf.text's `get_split_indices` (greedy longest match over
        the `selected` strings) starts a piece, over all words."""
        hits = np.flatnonzero(selected[self.cand_string])
        first = hits[np.r_[True, self.cand_key[hits[1:]] != self.cand_key[hits[:-1]]]] if hits.size else hits
        step = np.ones(2 * len(self.strings), np.int64)  # a single character is always a token
        step[self.cand_key[first]] = self.cand_step[first]
        starts = []
        units = self.word_first_unit
        while units.size:
            starts.append(units)
            steps = step[self.unit_key[units]]
            units = (units + steps)[steps < self.unit_rest[units]]
        return np.concatenate(starts) if starts else np.zeros(0, np.int64)

    def _learn_with_thresh(self, thresh):
        """(vocabulary size, token mask, token counts) of tf.text's `learn_with_thresh`."""
        if self.candidates_cut is None or thresh < self.candidates_cut:
            self._make_candidates(max(1, thresh // 2))
        selected, values = self._tokens(self.suffix_counts, thresh)
        for _ in range(1, self.num_iterations):
            selected, values = self._tokens(self._counts(self._piece_starts(selected)), thresh)
        size = int(selected.sum()) + int((~selected[self.reserved_strings]).sum()) + self.reserved_new
        return size, selected, values

    def vocabulary(self, thresh):
        """tf.text's `learn_with_thresh`: reserved tokens, characters, then the tokens by
        count (descending) and string."""
        _, selected, values = self._learn_with_thresh(thresh)
        tokens = np.flatnonzero(selected)
        ranked = sorted(zip((-values[tokens]).tolist(), [self.strings[t] for t in tokens]))
        vocabulary = list(dict.fromkeys(self.reserved_tokens + self.char_tokens + [token for _, token in ranked]))
        return vocabulary

    def learn(self, vocab_size, lower_thresh=10, upper_thresh=int(1e7), slack_ratio=0.05):
        """tf.text's `learn_binary_search` over thresholds clipped to the counts as its
        `get_search_threshs` does; each threshold is learned once per learner."""
        if upper_thresh is not None and upper_thresh < 1:
            raise ValueError(f"upper_thresh must be at least 1, got {upper_thresh}.")
        upper = self.max_count if upper_thresh is None or self.max_count < upper_thresh else upper_thresh
        lower = self.min_count if lower_thresh is None or self.min_count > lower_thresh else lower_thresh
        slack = max(slack_ratio * vocab_size, 0)
        while True:
            thresh = (upper + lower) // 2
            if thresh not in self._sizes:
                self._sizes[thresh] = self._learn_with_thresh(thresh)[0]
            size = self._sizes[thresh]
            if (size <= vocab_size and vocab_size - size <= slack) or lower >= upper or thresh <= 1:
                return self.vocabulary(thresh)
            if size > vocab_size:
                lower = thresh + 1
            else:
                upper = thresh - 1


def learn(word_counts, vocab_size, reserved_tokens, upper_thresh=int(1e7), lower_thresh=10, slack_ratio=0.05, **kw):
    """Drop-in for tf.text's `wordpiece_tokenizer_learner_lib.learn` (joiner "##")."""
    return WordPieceLearner(word_counts, reserved_tokens, **kw).learn(
        vocab_size, lower_thresh, upper_thresh, slack_ratio
    )


def _prefix_ends(ordered):
    """For each of the sorted strings `ordered`, the end of the range after it that starts with it."""
    ends = array("q", bytes(8 * len(ordered)))
    stack = []
    for j, string in enumerate(ordered):
        while stack and not string.startswith(ordered[stack[-1]]):
            ends[stack.pop()] = j
        stack.append(j)
    for i in stack:
        ends[i] = len(ordered)
    return np.frombuffer(ends, np.int64)


def _filter_input_words(pairs, max_unique_chars, max_input_tokens):
    """tf.text's `get_allowed_chars` + `filter_input_words`: keep words made of the
    `max_unique_chars` most frequent characters (count-weighted, ties by character),
    at most `max_input_tokens` of them, the most frequent first."""
    words = [word for word, _ in pairs]
    counts = np.asarray([count for _, count in pairs], np.int64)
    lengths = np.asarray([len(word) for word in words], np.int64)
    codes = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"), np.uint32).astype(np.int64)
    char_counts = np.bincount(codes, np.repeat(counts, lengths)) if codes.size else np.zeros(0)
    present = np.flatnonzero(np.bincount(codes) if codes.size else np.zeros(0))
    ranked = present[np.lexsort((present, -char_counts[present]))]
    allowed = np.zeros(max(len(char_counts), 1), bool)
    allowed[ranked[:max_unique_chars]] = True
    bad = np.r_[0, np.cumsum(~allowed[codes])]
    ends = np.cumsum(lengths)
    has_bad = bad[ends] - bad[ends - lengths] > 0
    order = np.argsort(-counts, kind="stable")
    order = order[~has_bad[order]]
    if max_input_tokens is not None and max_input_tokens != -1:
        order = order[:max_input_tokens]
    return [words[i] for i in order], counts[order]

"""Dynamic masking as a `tf.data` pipeline: raw text in, new pre-training batches every epoch.

The original create_pretraining_data.py recipe (`pretraining_data.InstanceMaker`) with
every step in the graph, so tf.data runs it on all cores and no Python runs per element:

1. Files are dealt to `cycle_length` readers, which read them in parallel, each in a new
   order every epoch (seeded), a whole file at a time (shard a large corpus into files of
   tens of MB). Each reader has its own map function: TensorFlow's regex kernels
   serialize the threads that share one.
2. A file -> documents of sentences, as `pretraining_data.read_documents` reads it
   ("lines", "prose" or "auto" per file), then the in-graph `BertTokenizer` on all of
   its sentences at once.
3. Documents of the readers' current files are interleaved and taken in groups of
   `documents_per_group`; each group becomes instances in one parallel map: the recipe's
   A/B chunks (short targets with `short_seq_prob`, IsNext from the same chunk, NotNext
   with a B from a random other document, unused sentences put back), truncation and
   80/10/10 masking, for all of the group's documents at once.
4. Instances are shuffled within their group, then cut into batches.

Differences from the recipe, by design: the "random other document" of a NotNext pair is
drawn from the documents of the same group (uniformly, as the original draws from the
whole corpus), not from the whole corpus. Randomness is stateless, seeded by
(seed, group index), so the stream is the same on every run for a seed and a resumed
run can skip the batches it already trained on. The statistics are the recipe's:
truncation removes the same number of tokens (its front/back coin flips summed as a
binomial), and masking takes whole candidates greedily in a random order, as the
original does.
"""

import os
import re

import tensorflow as tf

from bert_keras.data.pretraining_data import (
    ABBREVIATIONS, HEADING_ENDS, HEADING_WORDS, LINE_ENDS, InstanceMaker, check_format, expand_files,
)
from bert_keras.text.tokenizer import _ragged_cond

_ABBREVIATIONS = "|".join(re.escape(abbreviation) for abbreviation in ABBREVIATIONS)
# Python's str.splitlines line breaks, and its whitespace (str.split, str.strip, \s), for RE2.
_LINE_BREAK = r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x{85}\x{2028}\x{2029}]"
_OTHER_SPACES = r"\t\n\x0b\x0c\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
_WHITESPACE = f"[ {_OTHER_SPACES}]"
_WHITESPACE_BUT_SPACE = f"[{_OTHER_SPACES}]"
# Markers that real text does not contain (Unicode noncharacters).
_PARAGRAPH_MARK = "\ufdd0"
_SENTENCE_MARK = "\ufdd1"
_CLOSERS = "[\"'\\x{2019}\\x{201d})\\]_]"


def dynamic_masking_dataset(
    input_files,
    tokenizer,
    batch_size,
    max_seq_length=128,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    short_seq_prob=0.1,
    whole_word_mask=False,
    seed=0,
    format="auto",
    skip_batches=0,
    documents_per_group=256,
    cycle_length=8,
    cache_tokens=False,
    parallel_calls=None,
):
    """An endless dataset of the model's feature dict made from raw text files.

    New A/B pairings and masks every epoch; the same stream for the same arguments, so
    a resumed run can `skip_batches`. Static shapes (`drop_remainder`). A corpus with no
    text at all is an error when the first batch is read. `cache_tokens` keeps the
    tokenized corpus in memory (4 bytes a token) after the first epoch, so that later
    epochs only pair and mask: for a corpus that fits. `cycle_length` readers read and
    tokenize files at once; `parallel_calls` groups are paired and masked at once (default:
    the cores this process may use). The stream depends on the seed, the files and
    `cycle_length`, not on `parallel_calls`.
    """
    check_format(format)
    files = expand_files(input_files)
    maker = GraphInstanceMaker(InstanceMaker(
        tokenizer.vocabulary,
        max_seq_length=max_seq_length,
        short_seq_prob=short_seq_prob,
        masked_lm_prob=masked_lm_prob,
        max_predictions_per_seq=max_predictions_per_seq,
        whole_word_mask=whole_word_mask,
    ))

    def tokenized_documents(path):
        documents = file_documents(tf.io.read_file(path), format)
        pieces = tokenizer.tokenize(documents.flat_values)
        # As the original: sentences with no pieces are dropped, then documents left empty.
        nonempty = documents.with_flat_values(pieces.row_lengths() > 0)
        tokenized = tf.ragged.boolean_mask(documents.with_flat_values(pieces), nonempty)
        return tf.ragged.boolean_mask(tokenized, tokenized.row_lengths() > 0)

    def reader(shard):
        """One reader's files, tokenized one after the other in its own thread."""
        shard = tf.data.Dataset.from_tensor_slices(shard)
        if not cache_tokens:
            shard = shard.shuffle(len(shard), seed=seed, reshuffle_each_iteration=True)
        shard = shard.map(tokenized_documents)
        if cache_tokens:
            shard = shard.cache().shuffle(len(shard), seed=seed, reshuffle_each_iteration=True)
        return shard.prefetch(1)

    readers = min(cycle_length, len(files))
    dataset = tf.data.Dataset.choose_from_datasets(  # the readers in turn, file by file
        [reader(files[k::readers]) for k in range(readers)],
        tf.data.Dataset.range(len(files)).map(lambda index: index % readers),
    )
    dataset = dataset.interleave(tf.data.Dataset.from_tensor_slices, cycle_length=readers, block_length=1)
    # Groups within an epoch, so a small corpus does not pair a document with its own copy.
    dataset = dataset.batch(documents_per_group)
    # An empty corpus ends `repeat`; the assertion turns that into an error.
    dataset = dataset.repeat().apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    dataset = dataset.enumerate()
    dataset = dataset.map(
        lambda index, documents: maker.instances(documents, tf.stack([tf.cast(seed, tf.int64), index])),
        # AUTOTUNE picks 1 for these few large elements; order does not depend on it.
        num_parallel_calls=parallel_calls or _usable_cores(),
        deterministic=True,
    )
    dataset = dataset.rebatch(batch_size, drop_remainder=True)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    options = tf.data.Options()
    options.deterministic = True
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def _usable_cores():
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# ---------------------------------------------------------------- reading documents in the graph


def file_documents(raw, format="auto"):
    """A file's bytes -> ragged `[documents, (sentences)]` strings, as `read_documents`."""
    # Invalid UTF-8 bytes are dropped, as the original reader does (ASCII needs no check).
    text = tf.cond(
        tf.strings.regex_full_match(raw, "(?s)[\\x00-\\x7f]*"),
        lambda: raw,
        lambda: tf.strings.unicode_transcode(raw, "UTF-8", "UTF-8", errors="ignore"),
    )
    if format == "lines":
        return _line_documents(text)
    if format == "prose":
        return _prose_documents(text)
    return _ragged_cond(_is_prose(text), lambda: (_prose_documents(text),), lambda: (_line_documents(text),))[0]


def _lines(text, limit=None):
    """str.splitlines (plus a trailing empty line); with `limit`, the first `limit` lines,
    without scanning the rest of the text."""
    if limit is not None:  # the first `limit` "\n"-separated pieces hold at least `limit` lines
        text = tf.strings.reduce_join(tf.strings.split(text, "\n", maxsplit=limit)[:limit], separator="\n")
    return tf.strings.split(tf.strings.regex_replace(text, _LINE_BREAK, "\n"), "\n")[:limit]


def _one_of(characters):
    """An RE2 character class of `characters`."""
    return "[" + "".join(re.escape(character) for character in characters) + "]"


def _strip(strings):
    return tf.strings.regex_replace(strings, f"^{_WHITESPACE}+|{_WHITESPACE}+$", "")


def _is_prose(text):
    """`detect_format`: most of the first 2000 non-blank lines end without a sentence end."""
    lines = _strip(_lines(text, 2000))
    lines = tf.boolean_mask(lines, tf.strings.length(lines) > 0)
    ending = tf.strings.regex_full_match(lines, f"(?s).*{_one_of(LINE_ENDS)}")
    count = tf.size(lines)
    return tf.logical_and(count > 0, 2 * tf.reduce_sum(tf.cast(ending, tf.int32)) < count)


def _line_documents(text):
    """One sentence per line, a blank line between documents."""
    lines = _strip(_lines(text))
    blank = tf.equal(tf.strings.length(lines), 0)
    documents = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(lines, ~blank), tf.boolean_mask(tf.cumsum(tf.cast(blank, tf.int64)), ~blank),
        nrows=tf.reduce_sum(tf.cast(blank, tf.int64)) + 1, validate=False,
    )
    return tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)


def _prose_documents(text):
    """Paragraphs split into sentences; a heading starts a new document and is dropped."""
    marked = tf.strings.regex_replace(text, f"\n(?:{_WHITESPACE})*\n", _PARAGRAPH_MARK)
    paragraphs = _strip(tf.strings.split(marked, _PARAGRAPH_MARK))
    single_line = ~tf.strings.regex_full_match(paragraphs, "(?s).*\n.*")
    heading = (
        single_line
        & tf.strings.regex_full_match(
            paragraphs,
            rf"(?:(?:{'|'.join(HEADING_WORDS)})\b|[IVXLC]+\.{_WHITESPACE}|[IVXLC]+$).*",
        )
        & ~tf.strings.regex_full_match(paragraphs, f"(?s).*{_one_of(HEADING_ENDS)}")
    )
    title = tf.strings.regex_full_match(paragraphs, r"\[[^\n]*\]")
    keep = ~heading & ~title & (tf.strings.length(paragraphs) > 0)
    document_index = tf.boolean_mask(tf.cumsum(tf.cast(heading, tf.int64)), keep)
    sentences = split_sentences(tf.boolean_mask(paragraphs, keep))  # [paragraphs, (sentences)]
    documents = tf.RaggedTensor.from_value_rowids(
        sentences.flat_values,
        tf.repeat(document_index, sentences.row_lengths()),
        nrows=tf.reduce_sum(tf.cast(heading, tf.int64)) + 1,
        validate=False,
    )
    return tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)


def split_sentences(paragraphs):
    """`pretraining_data.split_sentences` on a batch: strings -> ragged `[batch, (sentences)]`.

    RE2 has no look-around, so every candidate end is marked, then the pieces whose
    end is an abbreviation or an initial ("Mr.", "A.") are joined to the next one.
    """
    # Runs of whitespace -> one space (only where that changes something: much faster).
    text = tf.strings.regex_replace(paragraphs, f"{_WHITESPACE}{{2,}}|{_WHITESPACE_BUT_SPACE}", " ")
    text = _strip(text)
    text = tf.strings.regex_replace(
        text, f"([.!?]+{_CLOSERS}*) ([\"'\\x{{2018}}\\x{{201c}}(\\[_]*[A-Z0-9])", f"\\1{_SENTENCE_MARK}\\2"
    )
    pieces = tf.strings.split(text, _SENTENCE_MARK)
    flat = pieces.flat_values
    # The word before a candidate end that starts with "." (an end starting with ! or ?
    # leaves the word empty or ending in ! or ?, never an abbreviation or a letter).
    word = tf.strings.regex_replace(
        flat, f"(?s)^(?:.* )?(?:(\\S*?)\\.[.!?]*|\\S*?[!?][.!?]*){_CLOSERS}*$", "\\1"
    )
    not_an_end = tf.strings.regex_full_match(word, f"(?i){_ABBREVIATIONS}|\\p{{L}}")
    index = tf.range(tf.size(flat, out_type=tf.int64))
    last = tf.equal(index, tf.gather(pieces.row_limits(), pieces.value_rowids()) - 1)
    ends = last | ~not_an_end
    # Sentence of each piece: the number of ends before it.
    sentence = tf.cumsum(tf.cast(ends, tf.int64), exclusive=True)
    joined = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(flat, sentence, validate=False), axis=1, separator=" "
    )
    sentences_per_row = tf.math.unsorted_segment_sum(tf.cast(ends, tf.int64), pieces.value_rowids(), pieces.nrows())
    result = tf.RaggedTensor.from_row_lengths(joined, sentences_per_row, validate=False)
    return tf.ragged.boolean_mask(result, tf.strings.length(result) > 0)


# ---------------------------------------------------------------- instances in the graph


class GraphInstanceMaker:
    """`InstanceMaker.from_document` + `mask` for a group of tokenized documents at once,
    with the settings of `recipe` (an `InstanceMaker`)."""

    def __init__(self, recipe):
        self.recipe = recipe
        self.continuation = tf.constant(recipe.continuation)
        self.max_seq_length = recipe.max_seq_length

    def instances(self, documents, seed):
        """Ragged `[documents, (sentences), (tokens)]` ids and a stateless seed `[2]` ->
        the model's feature dict for every instance, in a random order."""
        target_seed, chunk_seed, cut_seed, order_seed, replace_seed, shuffle_seed = tf.unstack(
            tf.random.experimental.stateless_split(seed, 6)
        )
        *spans, random_next = self._spans(documents, target_seed, chunk_seed)
        a_start, a_length, b_start, b_length = self._truncate(*spans, cut_seed)
        input_ids, segment_ids, length = self._layout(documents.flat_values, a_start, a_length, b_start, b_length)
        features = self._mask(input_ids, length, order_seed, replace_seed)
        features["input_type_ids"] = segment_ids
        features["input_mask"] = tf.cast(tf.range(self.max_seq_length)[tf.newaxis] < length[:, tf.newaxis], tf.int32)
        features["next_sentence_labels"] = tf.cast(random_next[:, tf.newaxis], tf.int32)
        order = tf.argsort(tf.random.stateless_uniform(tf.shape(length), shuffle_seed))
        return {name: tf.gather(value, order) for name, value in features.items()}

    def _spans(self, documents, target_seed, loop_seed):
        """The recipe's chunks: (A start, A length, B start, B length) in the group's flat
        tokens and is_random_next, for every instance of every document."""
        max_num_tokens = self.max_seq_length - 3
        num_documents = documents.nrows(out_type=tf.int32)
        sentence_splits = tf.cast(documents.row_splits, tf.int32)  # document -> its sentences
        # Token offset of every sentence start, and of the end (strictly increasing: no empty sentences).
        offsets = tf.cast(documents.values.row_splits, tf.int32)
        first, limit = sentence_splits[:-1], sentence_splits[1:]
        short = tf.random.stateless_uniform([num_documents], target_seed) < self.recipe.short_seq_prob
        short_target = tf.random.stateless_uniform(
            [num_documents], tf.random.experimental.stateless_fold_in(target_seed, 1), 2, max_num_tokens + 1, tf.int32
        )
        target = tf.where(short, short_target, max_num_tokens)

        def chunk_end(start, length_goal, last):
            """Last sentence of the run from `start` that reaches `length_goal` tokens (or `last`)."""
            reach = tf.searchsorted(offsets, tf.gather(offsets, start) + length_goal, side="left") - 1
            return tf.clip_by_value(reach, start, last)

        def step(t, position, outputs):
            seed = tf.random.experimental.stateless_fold_in(loop_seed, t)
            u = tf.random.stateless_uniform([3, num_documents], seed)
            active = position < limit
            start = tf.minimum(position, limit - 1)
            end = chunk_end(start, target, limit - 1)
            chunk = end - start + 1
            a_end = tf.where(chunk >= 2, 1 + tf.cast(u[0] * tf.cast(chunk - 1, tf.float32), tf.int32), 1)
            a_end = tf.minimum(a_end, tf.maximum(chunk - 1, 1))
            random_next = (chunk == 1) | (u[1] < 0.5)
            a_first = tf.gather(offsets, start)
            a_length = tf.gather(offsets, start + a_end) - a_first
            # NotNext: up to 10 draws for a document other than this one, as the original.
            draws = tf.random.stateless_uniform(
                [10, num_documents], tf.random.experimental.stateless_fold_in(seed, 1), 0, num_documents, tf.int32
            )
            other = draws != tf.range(num_documents)[tf.newaxis]
            pick = tf.where(tf.reduce_any(other, 0), tf.argmax(tf.cast(other, tf.int32), 0, output_type=tf.int32), 9)
            partner = tf.gather_nd(draws, tf.stack([pick, tf.range(num_documents)], 1))
            partner_first, partner_limit = tf.gather(first, partner), tf.gather(limit, partner)
            partner_start = partner_first + tf.cast(u[2] * tf.cast(partner_limit - partner_first, tf.float32), tf.int32)
            partner_start = tf.minimum(partner_start, partner_limit - 1)
            partner_end = chunk_end(partner_start, target - a_length, partner_limit - 1)
            b_first = tf.where(random_next, tf.gather(offsets, partner_start), tf.gather(offsets, start + a_end))
            b_limit = tf.where(random_next, tf.gather(offsets, partner_end + 1), tf.gather(offsets, end + 1))
            row = tf.stack([a_first, a_length, b_first, b_limit - b_first, tf.cast(random_next, tf.int32),
                            tf.cast(active, tf.int32)], 1)
            # NotNext puts the chunk's unused sentences back.
            next_position = tf.where(random_next, start + a_end, end + 1)
            return t + 1, tf.where(active, next_position, position), outputs.write(t, row)

        _, _, outputs = tf.while_loop(
            lambda t, position, outputs: tf.reduce_any(position < limit),
            step,
            (0, first, tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, 6])),
        )
        rows = tf.reshape(outputs.stack(), [-1, 6])
        rows = tf.boolean_mask(rows, rows[:, 5] > 0)
        return tuple(rows[:, i] for i in range(4)) + (rows[:, 4] > 0,)

    def _truncate(self, a_start, a_length, b_start, b_length, seed):
        """`truncate_seq_pair` in closed form: the longer side loses a token until the pair
        fits, each from the front or the back by a fair coin."""
        budget = self.max_seq_length - 3
        excess = tf.maximum(a_length + b_length - budget, 0)
        difference = a_length - b_length
        balanced = tf.abs(difference) < excess  # both sides are cut, down to half each
        new_a = tf.where(
            balanced, (budget + 1) // 2, tf.where(difference > 0, a_length - excess, a_length)
        )
        new_b = tf.where(
            balanced, budget // 2, tf.where(difference > 0, b_length, b_length - excess)
        )
        new_a = tf.where(excess > 0, new_a, a_length)
        new_b = tf.where(excess > 0, new_b, b_length)
        cut = tf.cast(tf.stack([a_length - new_a, b_length - new_b]), tf.float32)
        front = tf.random.stateless_binomial(tf.shape(cut), seed, cut, 0.5, tf.int32)
        return a_start + front[0], new_a, b_start + front[1], new_b

    def _layout(self, tokens, a_start, a_length, b_start, b_length):
        """[CLS] A [SEP] B [SEP], zero-padded: (input ids, segment ids, length)."""
        position = tf.range(self.max_seq_length)[tf.newaxis]
        a_length, b_length = a_length[:, tf.newaxis], b_length[:, tf.newaxis]
        in_a = (position >= 1) & (position <= a_length)
        b_offset = position - a_length - 2
        in_b = (b_offset >= 0) & (b_offset < b_length)
        source = tf.where(in_a, a_start[:, tf.newaxis] + position - 1, b_start[:, tf.newaxis] + b_offset)
        text = tf.gather(tokens, tf.where(in_a | in_b, source, 0))
        length = a_length + b_length + 3
        separator = (position == a_length + 1) | (position == length - 1)
        input_ids = tf.where(
            in_a | in_b, text, tf.where(position == 0, self.recipe.cls_id, tf.where(separator, self.recipe.sep_id, 0))
        )
        segment_ids = tf.cast((position > a_length + 1) & (position < length), tf.int32)
        return input_ids, segment_ids, length[:, 0]

    def _mask(self, input_ids, length, order_seed, replace_seed):
        """`InstanceMaker.mask`: candidates (words with whole-word masking) in a random
        order, each taken whole if it still fits in num_to_predict; 80/10/10."""
        size = self.max_seq_length
        position = tf.range(size)[tf.newaxis]
        special = (input_ids == self.recipe.cls_id) | (input_ids == self.recipe.sep_id)
        candidate = (position < length[:, tf.newaxis]) & ~special
        starts = candidate
        if self.recipe.whole_word_mask:
            # A "##" piece joins the candidate before it (the first candidate always starts one).
            earlier = tf.cumsum(tf.cast(candidate, tf.int32), axis=1, exclusive=True) > 0
            starts = candidate & ~(tf.gather(self.continuation, input_ids) & earlier)
        group = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # candidate group of each position
        rows = tf.shape(input_ids)[0]
        group_size = tf.reshape(  # [instances, groups]
            tf.math.unsorted_segment_sum(
                tf.cast(candidate, tf.int32), tf.range(rows)[:, tf.newaxis] * size + tf.maximum(group, 0), rows * size
            ),
            [rows, size],
        )
        # The greedy choice reaches num_to_predict within the first max_predictions
        # candidates when each is one token; whole words may need all of them.
        considered = size if self.recipe.whole_word_mask else min(size, self.recipe.max_predictions_per_seq)
        priority = tf.random.stateless_uniform(tf.shape(group_size), order_seed)
        order = tf.math.top_k(tf.where(group_size > 0, -priority, -2.0), considered).indices
        sizes_in_order = tf.gather(group_size, order, batch_dims=1)
        num_to_predict = tf.minimum(
            self.recipe.max_predictions_per_seq,
            tf.maximum(1, tf.cast(tf.round(tf.cast(length, tf.float64) * self.recipe.masked_lm_prob), tf.int32)),
        )

        def take(count, sizes):
            fits = (sizes > 0) & (count + sizes <= num_to_predict)
            return count + tf.where(fits, sizes, 0)

        counts = tf.scan(take, tf.transpose(sizes_in_order), initializer=tf.zeros_like(num_to_predict))
        before = tf.concat([tf.zeros_like(counts[:1]), counts[:-1]], axis=0)
        taken_in_order = tf.cast(tf.transpose(counts > before), tf.int32)
        row = tf.broadcast_to(tf.range(rows)[:, tf.newaxis], tf.shape(order))
        taken_group = tf.scatter_nd(tf.stack([row, order], -1), taken_in_order, [rows, size]) > 0
        masked = candidate & tf.gather(taken_group, tf.maximum(group, 0), batch_dims=1)
        u = tf.random.stateless_uniform([2, rows, size], replace_seed)
        random_ids = tf.random.stateless_uniform(
            [rows, size], tf.random.experimental.stateless_fold_in(replace_seed, 1), 0, self.recipe.vocab_size, tf.int32
        )
        replacement = tf.where(u[0] < 0.8, self.recipe.mask_id, tf.where(u[1] < 0.5, input_ids, random_ids))
        positions = tf.ragged.boolean_mask(tf.broadcast_to(position, [rows, size]), masked)
        predictions = self.recipe.max_predictions_per_seq
        weights = tf.range(predictions, dtype=tf.int64)[tf.newaxis] < positions.row_lengths()[:, tf.newaxis]
        positions = positions.to_tensor(shape=[None, predictions])
        return {
            "input_word_ids": tf.where(masked, replacement, input_ids),
            "masked_lm_positions": positions,
            "masked_lm_ids": tf.where(weights, tf.gather(input_ids, positions, batch_dims=1), 0),
            "masked_lm_weights": tf.cast(weights, tf.float32),
        }

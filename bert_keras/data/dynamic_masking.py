"""Dynamic masking as a `tf.data` pipeline: raw text in, new pre-training batches every epoch.

The original create_pretraining_data.py recipe (`instances.InstanceMaker`) with
every step in the graph, so tf.data runs it on all cores and no Python runs per element:

1. Files are dealt to `cycle_length` readers, which read them in parallel, each in a new
   order every epoch (seeded), a whole file at a time (shard a large corpus into files of
   tens of MB). Each reader has its own map function: TensorFlow's regex kernels
   serialize the threads that share one.
2. A file -> documents of sentences, as `documents.read_documents` reads it
   ("lines", "prose" or "auto" per file), then the in-graph `BertTokenizer` on all of
   its sentences at once. With a token cache this runs once per file, before the first
   epoch, and every epoch reads the token ids it wrote.
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
chunks follow the same walk (found by pointer doubling, not step by step), truncation
removes the same number of tokens (its front/back coin flips summed as a binomial), and
masking takes whole words greedily in a random order, as the original does (single
tokens: num_to_predict of them drawn without replacement, which that order amounts to).
"""

import hashlib
import json
import os
import re
import sys

import tensorflow as tf

from bert_keras.data.documents import (
    ABBREVIATIONS,
    HEADING_ENDS,
    HEADING_WORDS,
    LINE_ENDS,
    check_format,
    tokenizer_fingerprint,
)
from bert_keras.data.instances import InstanceMaker
from bert_keras.data.tfrecords import expand_files
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
    token_cache=None,
    parallel_calls=None,
    progress=False,
):
    """An endless dataset of the model's feature dict made from raw text files.

    New A/B pairings and masks every epoch; the same stream for the same arguments, so
    a resumed run can `skip_batches`. Static shapes (`drop_remainder`). A corpus with no
    text at all is an error when the first batch is read. With `token_cache` (a folder)
    each file is tokenized once, up front, into a file of token ids there
    (`cache_tokenized_files`), and every epoch reads those: the same stream, but later
    epochs and runs only pair and mask. `cycle_length` files are read at once;
    `parallel_calls` groups are paired and masked at once (default: the cores this
    process may use). The stream depends on the seed, the files and `cycle_length`, not
    on `parallel_calls` or the cache.
    """
    check_format(format)
    files = expand_files(input_files)
    maker = GraphInstanceMaker(
        InstanceMaker(
            tokenizer.vocabulary,
            max_seq_length=max_seq_length,
            short_seq_prob=short_seq_prob,
            masked_lm_prob=masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
            whole_word_mask=whole_word_mask,
        )
    )
    if token_cache is None:

        def read(path):
            return tokenized_documents(tf.io.read_file(path), tokenizer, format)
    else:
        files = cache_tokenized_files(files, tokenizer, token_cache, format, cycle_length, progress)
        read = read_token_file
    # Each file once an epoch, in a new order every epoch.
    dataset = _read_files(files, read, cycle_length, seed)
    dataset = dataset.interleave(tf.data.Dataset.from_tensor_slices, cycle_length=cycle_length, block_length=1)
    # Groups within an epoch, so a small corpus does not pair a document with its own copy.
    dataset = dataset.batch(documents_per_group)
    # An empty corpus ends `repeat`; the assertion turns that into an error.
    dataset = dataset.repeat().apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    dataset = dataset.enumerate()
    # do_not_convert here and in _read_files: the functions use tf.cond/tf.while_loop themselves,
    # and AutoGraph's conversion of them took longer than building their graphs.
    dataset = dataset.map(
        tf.autograph.experimental.do_not_convert(
            lambda index, documents: maker.instances(documents, tf.stack([tf.cast(seed, tf.int64), index]))
        ),
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


def _read_files(files, read, readers, seed=None):
    """`read(path)` for every file, by `readers` readers at once, each in its own thread
    with its own copy of `read` (TensorFlow's regex kernels serialize the threads that
    share one). Reader k reads files k, k + readers, ...: in that order, or with `seed`
    in a new order every epoch; the readers take turns, one file each."""
    readers = min(readers, len(files))

    def reader(shard):
        shard = tf.data.Dataset.from_tensor_slices(shard)
        if seed is not None:
            shard = shard.shuffle(len(shard), seed=seed, reshuffle_each_iteration=True)
        return shard.map(tf.autograph.experimental.do_not_convert(read)).prefetch(1)

    return tf.data.Dataset.choose_from_datasets(
        [reader(files[k::readers]) for k in range(readers)],
        tf.data.Dataset.range(len(files)).map(lambda index: index % readers),
    )


def _usable_cores():
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# ---------------------------------------------------------------- the token cache

# A token file: int32 little-endian [magic, version, documents, sentences, the sentence
# count of each document, the token count of each sentence, the token ids].
_TOKEN_FILE_MAGIC, _TOKEN_FILE_VERSION, _TOKEN_FILE_SUFFIX = 0x424B5443, 1, ".tokens"  # "BKTC"


def cache_tokenized_files(files, tokenizer, directory, format="auto", readers=8, progress=False):
    """Tokenizes each text file into a token file in `directory` unless it is there
    already: the token files' paths, in the order of `files`.

    A token file is named after its text file's path, size and modification time, the
    tokenizer and the format, so a changed input or tokenizer gets a new one. Each is
    written whole or not at all (a temporary file renamed), so a run killed half-way
    keeps the files it finished and the next run tokenizes only the rest. About 4 bytes
    a token: as much disk as the text.
    """
    check_format(format)
    tf.io.gfile.makedirs(directory)
    settings = {"version": _TOKEN_FILE_VERSION, "format": format, "tokenizer": tokenizer_fingerprint(tokenizer)}
    paths = []
    for file in files:
        stat = tf.io.gfile.stat(file)
        key = json.dumps({**settings, "path": file, "bytes": stat.length, "mtime_ns": stat.mtime_nsec}, sort_keys=True)
        name = f"{os.path.basename(file)}.{hashlib.sha256(key.encode()).hexdigest()[:16]}{_TOKEN_FILE_SUFFIX}"
        paths.append(os.path.join(directory, name))
    todo = [(file, path) for file, path in zip(files, paths) if not tf.io.gfile.exists(path)]
    if not todo:
        return paths
    bar = None
    if progress:
        import keras

        print(f"tokenizing {len(todo)} of {len(files)} file(s) into {directory}", file=sys.stderr, flush=True)
        bar = keras.utils.Progbar(len(files), unit_name="file")
        bar.update(len(files) - len(todo))

    def token_file(path):
        documents = tokenized_documents(tf.io.read_file(path), tokenizer, format)
        return tf.concat(
            [
                [_TOKEN_FILE_MAGIC, _TOKEN_FILE_VERSION],
                tf.cast([documents.nrows(), documents.values.nrows()], tf.int32),
                tf.cast(documents.row_lengths(), tf.int32),
                tf.cast(documents.values.row_lengths(), tf.int32),
                documents.flat_values,
            ],
            0,
        )

    tokenized = _read_files([file for file, _ in todo], token_file, readers)
    for done, ((_, path), ids) in enumerate(zip(todo, tokenized.as_numpy_iterator()), len(files) - len(todo) + 1):
        partial = f"{path}.partial-{os.getpid()}"
        with tf.io.gfile.GFile(partial, "wb") as file:
            file.write(ids.astype("<i4").tobytes())
        tf.io.gfile.rename(partial, path, overwrite=True)
        if bar is not None:
            bar.update(done)
    return paths


def read_token_file(path):
    """A token file -> ragged `[documents, (sentences), (tokens)]` int32 ids."""
    ids = tf.io.decode_raw(tf.io.read_file(path), tf.int32, little_endian=True)
    documents, sentences = ids[2], ids[3]
    sentence_lengths = ids[4 + documents : 4 + documents + sentences]
    whole = tf.reduce_all(
        tf.equal(
            tf.stack([ids[0], ids[1], tf.size(ids)]),
            tf.stack(
                [_TOKEN_FILE_MAGIC, _TOKEN_FILE_VERSION, 4 + documents + sentences + tf.reduce_sum(sentence_lengths)]
            ),
        )
    )
    check = tf.debugging.Assert(whole, ["not a whole bert-keras token file (magic, version, size):", path])
    with tf.control_dependencies([check]):
        tokens = tf.identity(ids[4 + documents + sentences :])
    return tf.RaggedTensor.from_row_lengths(
        tf.RaggedTensor.from_row_lengths(tokens, sentence_lengths, validate=False),
        ids[4 : 4 + documents],
        validate=False,
    )


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


def tokenized_documents(raw, tokenizer, format="auto"):
    """A file's bytes -> ragged `[documents, (sentences), (tokens)]` ids. As the original,
    sentences with no pieces are dropped, then documents left empty."""
    documents = file_documents(raw, format)
    pieces = tokenizer.tokenize(documents.flat_values)
    nonempty = documents.with_flat_values(pieces.row_lengths() > 0)
    tokenized = tf.ragged.boolean_mask(documents.with_flat_values(pieces), nonempty)
    return tf.ragged.boolean_mask(tokenized, tokenized.row_lengths() > 0)


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
        tf.boolean_mask(lines, ~blank),
        tf.boolean_mask(tf.cumsum(tf.cast(blank, tf.int64)), ~blank),
        nrows=tf.reduce_sum(tf.cast(blank, tf.int64)) + 1,
        validate=False,
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
    """`documents.split_sentences` on a batch: strings -> ragged `[batch, (sentences)]`.

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
    word = tf.strings.regex_replace(flat, f"(?s)^(?:.* )?(?:(\\S*?)\\.[.!?]*|\\S*?[!?][.!?]*){_CLOSERS}*$", "\\1")
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
        spans = self._spans(documents, target_seed, chunk_seed)
        order = tf.argsort(tf.random.stateless_uniform(tf.shape(spans[0]), shuffle_seed))
        *spans, random_next = (tf.gather(span, order) for span in spans)
        a_start, a_length, b_start, b_length = self._truncate(*spans, cut_seed)
        input_ids, segment_ids, length = self._layout(documents.flat_values, a_start, a_length, b_start, b_length)
        features = self._mask(input_ids, length, a_length, order_seed, replace_seed)
        features["input_type_ids"] = segment_ids
        features["input_mask"] = tf.cast(tf.range(self.max_seq_length)[tf.newaxis] < length[:, tf.newaxis], tf.int32)
        features["next_sentence_labels"] = tf.cast(random_next[:, tf.newaxis], tf.int32)
        return features

    def _spans(self, documents, target_seed, chunk_seed):
        """The recipe's chunks: (A start, A length, B start, B length) in the group's flat
        tokens and is_random_next, for every instance of every document.

        The recipe walks each document: a chunk from sentence `start` runs to the sentence
        that reaches the target length; A is its first 1..n-1 sentences; NotNext puts the
        rest back, so the next chunk starts after A, else after the chunk. Here every
        sentence's chunk (as if a chunk started there) is made at once, with random draws
        of its own, so the step to the next start is a fixed function of the start; the
        chunks of the walks from each document's first sentence are then found by pointer
        doubling, in log2(chunks per document) rounds rather than one step per chunk.
        """
        max_num_tokens = self.max_seq_length - 3
        num_documents = documents.nrows(out_type=tf.int32)
        sentence_splits = tf.cast(documents.row_splits, tf.int32)  # document -> its sentences
        # Token offset of every sentence start, and of the end (strictly increasing: no empty sentences).
        offsets = tf.cast(documents.values.row_splits, tf.int32)
        num_sentences = tf.shape(offsets)[0] - 1
        document = tf.cast(documents.value_rowids(), tf.int32)  # of every sentence
        first, limit = sentence_splits[:-1], sentence_splits[1:]
        short = tf.random.stateless_uniform([num_documents], target_seed) < self.recipe.short_seq_prob
        short_target = tf.random.stateless_uniform(
            [num_documents], tf.random.experimental.stateless_fold_in(target_seed, 1), 2, max_num_tokens + 1, tf.int32
        )
        target = tf.gather(tf.where(short, short_target, max_num_tokens), document)
        last = tf.gather(limit, document) - 1

        def chunk_end(start, length_goal, last):
            """Last sentence of the run from `start` that reaches `length_goal` tokens (or `last`)."""
            reach = tf.searchsorted(offsets, tf.gather(offsets, start) + length_goal, side="left") - 1
            return tf.clip_by_value(reach, start, last)

        start = tf.range(num_sentences)
        u = tf.random.stateless_uniform([2, num_sentences], chunk_seed)
        end = chunk_end(start, target, last)
        chunk = end - start + 1
        a_end = tf.where(chunk >= 2, 1 + tf.cast(u[0] * tf.cast(chunk - 1, tf.float32), tf.int32), 1)
        a_end = tf.minimum(a_end, tf.maximum(chunk - 1, 1))
        random_next = tf.equal(chunk, 1) | (u[1] < 0.5)
        # The next chunk's start; past the document's end, the sink `num_sentences`.
        step = tf.where(random_next, start + a_end, end + 1)
        step = tf.concat([tf.where(step > last, num_sentences, step), [num_sentences]], 0)
        visited = tf.scatter_nd(first[:, tf.newaxis], tf.ones_like(first), [num_sentences + 1]) > 0

        def double(visited, jump):
            """`jump` = step applied 2^k times, `visited` = the starts of the first 2^k chunks."""
            reached = tf.math.unsorted_segment_max(tf.cast(visited, tf.int32), jump, num_sentences + 1) > 0
            return visited | reached, tf.gather(jump, jump)

        visited, _ = tf.while_loop(lambda visited, jump: tf.reduce_any(jump < num_sentences), double, (visited, step))
        start = tf.cast(tf.where(visited[:-1])[:, 0], tf.int32)
        end, a_end, random_next, document, target = (
            tf.gather(value, start) for value in (end, a_end, random_next, document, target)
        )
        a_first = tf.gather(offsets, start)
        a_limit = tf.gather(offsets, start + a_end)  # where A ends and an IsNext B starts
        a_length = a_limit - a_first
        # NotNext: B from a uniformly random other document (the original's up to 10 draws
        # keep the same one with probability documents^-10); a lone document is its own.
        u = tf.random.stateless_uniform([2, tf.size(start)], tf.random.experimental.stateless_fold_in(chunk_seed, 1))
        other = tf.cast(u[0] * tf.cast(num_documents - 1, tf.float32), tf.int32)
        partner = tf.where(num_documents > 1, other + tf.cast(other >= document, tf.int32), document)
        partner_first, partner_limit = tf.gather(first, partner), tf.gather(limit, partner)
        partner_start = partner_first + tf.cast(u[1] * tf.cast(partner_limit - partner_first, tf.float32), tf.int32)
        partner_start = tf.minimum(partner_start, partner_limit - 1)
        partner_end = chunk_end(partner_start, target - a_length, partner_limit - 1)
        b_first = tf.where(random_next, tf.gather(offsets, partner_start), a_limit)
        b_limit = tf.where(random_next, tf.gather(offsets, partner_end + 1), tf.gather(offsets, end + 1))
        return a_first, a_length, b_first, b_limit - b_first, random_next

    def _truncate(self, a_start, a_length, b_start, b_length, seed):
        """`truncate_seq_pair` in closed form: the longer side loses a token until the pair
        fits, each from the front or the back by a fair coin."""
        budget = self.max_seq_length - 3
        excess = tf.maximum(a_length + b_length - budget, 0)
        difference = a_length - b_length
        balanced = tf.abs(difference) < excess  # both sides are cut, down to half each
        new_a = tf.where(balanced, (budget + 1) // 2, tf.where(difference > 0, a_length - excess, a_length))
        new_b = tf.where(balanced, budget // 2, tf.where(difference > 0, b_length, b_length - excess))
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
        separator = tf.equal(position, a_length + 1) | tf.equal(position, length - 1)
        input_ids = tf.where(
            in_a | in_b,
            text,
            tf.where(tf.equal(position, 0), self.recipe.cls_id, tf.where(separator, self.recipe.sep_id, 0)),
        )
        segment_ids = tf.cast((position > a_length + 1) & (position < length), tf.int32)
        return input_ids, segment_ids, length[:, 0]

    def _mask(self, input_ids, length, a_length, order_seed, replace_seed):
        """`InstanceMaker.mask`: up to num_to_predict candidates (every token but [CLS] and
        [SEP]) in a random order, whole words with whole-word masking; 80/10/10 for each."""
        size, predictions = self.max_seq_length, self.recipe.max_predictions_per_seq
        num_to_predict = tf.minimum(
            predictions,
            tf.maximum(1, tf.cast(tf.round(tf.cast(length, tf.float64) * self.recipe.masked_lm_prob), tf.int32)),
        )
        if self.recipe.whole_word_mask:
            position = tf.range(size)[tf.newaxis]
            special = tf.equal(input_ids, self.recipe.cls_id) | tf.equal(input_ids, self.recipe.sep_id)
            candidate = (position < length[:, tf.newaxis]) & ~special
            masked = self._whole_words(input_ids, candidate, order_seed, num_to_predict)
            # The masked positions in ascending order (the largest -position first).
            chosen = -tf.math.top_k(tf.where(masked, -position, -size), predictions).values
            count = tf.reduce_sum(tf.cast(masked, tf.int32), axis=1)
        else:
            # Single tokens: num_to_predict of the length - 3 candidates, drawn without
            # replacement; candidate r is at r + 1 in A, r + 2 in B.
            count = tf.minimum(num_to_predict, length - 3)
            ranks = tf.sort(_sample_without_replacement(length - 3, count, predictions, size, order_seed))
            chosen = ranks + 1 + tf.cast(ranks >= a_length[:, tf.newaxis], tf.int32)
        weights = tf.range(predictions)[tf.newaxis] < count[:, tf.newaxis]
        positions = tf.where(weights, chosen, 0)
        labels = tf.where(weights, tf.gather(input_ids, positions, batch_dims=1), 0)
        rows = tf.shape(input_ids)[0]
        # One draw from range(10 * vocab_size) a slot: its last digit picks [MASK] (0-7),
        # the token itself (8) or a random token (9), the rest is that random token.
        draw = tf.random.stateless_uniform([rows, predictions], replace_seed, 0, 10 * self.recipe.vocab_size, tf.int32)
        choice = draw % 10
        replacement = tf.where(choice < 8, self.recipe.mask_id, tf.where(tf.equal(choice, 8), labels, draw // 10))
        # Padding slots point at position 0 ([CLS]) and change nothing there.
        change = tf.math.unsorted_segment_sum(
            tf.where(weights, replacement - labels, 0), tf.range(rows)[:, tf.newaxis] * size + positions, rows * size
        )
        return {
            "input_word_ids": input_ids + tf.reshape(change, tf.shape(input_ids)),
            "masked_lm_positions": positions,
            "masked_lm_ids": labels,
            "masked_lm_weights": tf.cast(weights, tf.float32),
        }

    def _whole_words(self, input_ids, candidate, order_seed, num_to_predict):
        """The recipe's greedy choice of whole words: candidates (a word's pieces) in a
        random order, each taken whole if it still fits in num_to_predict."""
        size = self.max_seq_length
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
        priority = tf.random.stateless_uniform(tf.shape(group_size), order_seed)
        order = tf.math.top_k(tf.where(group_size > 0, -priority, -2.0), size).indices
        sizes_in_order = tf.gather(group_size, order, batch_dims=1)

        def take(count, sizes):
            fits = (sizes > 0) & (count + sizes <= num_to_predict)
            return count + tf.where(fits, sizes, 0)

        counts = tf.scan(take, tf.transpose(sizes_in_order), initializer=tf.zeros_like(num_to_predict))
        before = tf.concat([tf.zeros_like(counts[:1]), counts[:-1]], axis=0)
        taken_in_order = tf.cast(tf.transpose(counts > before), tf.int32)
        row = tf.broadcast_to(tf.range(rows)[:, tf.newaxis], tf.shape(order))
        taken_group = tf.scatter_nd(tf.stack([row, order], -1), taken_in_order, [rows, size]) > 0
        return candidate & tf.gather(taken_group, tf.maximum(group, 0), batch_dims=1)


def _sample_without_replacement(population, count, slots, limit, seed):
    """`count` distinct numbers from `range(population)` for every row, uniformly (Floyd's
    algorithm: `slots` steps over all rows at once, the numbers taken so far a bitmap of
    `limit` bits, `population <= limit`): `[rows, slots]`, the unused slots
    `slots + population` (after every number drawn)."""
    rows = tf.shape(population)[0]
    words = tf.range((limit + 63) // 64)[tf.newaxis]
    taken = tf.zeros([rows, (limit + 63) // 64], tf.int64)
    u = tf.random.stateless_uniform([slots, rows], seed)
    chosen = []
    for step in range(slots):
        top = population - count + step  # draw from range(top + 1); if taken, take `top`
        draw = tf.cast(u[step] * tf.cast(top + 1, tf.float32), tf.int32)
        bit = tf.cast(tf.clip_by_value(draw, 0, limit - 1), tf.int64)  # clipped: rows already done
        word = tf.gather(taken, bit // 64, batch_dims=1)
        draw = tf.where(tf.not_equal(tf.bitwise.bitwise_and(tf.bitwise.right_shift(word, bit % 64), 1), 0), top, draw)
        active = step < count
        bit = tf.cast(tf.clip_by_value(draw, 0, limit - 1), tf.int64)
        in_word = tf.equal(words, tf.cast(bit // 64, tf.int32)[:, tf.newaxis]) & active[:, tf.newaxis]
        mark = tf.bitwise.left_shift(tf.cast(in_word, tf.int64), (bit % 64)[:, tf.newaxis])
        taken = tf.bitwise.bitwise_or(taken, mark)
        chosen.append(tf.where(active, draw, slots + population))
    return tf.stack(chosen, 1)

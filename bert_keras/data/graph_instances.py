"""The pre-training recipe in the graph: `InstanceMaker` for a group of tokenized documents at once."""

import tensorflow as tf


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

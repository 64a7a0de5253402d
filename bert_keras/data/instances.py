"""Pre-training instances: the original create_pretraining_data.py recipe, on ids.

It follows google-research/bert step for step: the same random-number calls in the same
order on a `random.Random(seed)`, so the same documents give the same instances as the
original tool (WordPiece ids come from the in-graph `BertTokenizer`, which equals the
original tokenizer). Static data is written as TFRecords shard by shard by
`pretraining_shards.create_pretraining_data` (records encoded by `example_encoder`, read
back by `tfrecords.pretraining_dataset`); `dynamic_masking.dynamic_masking_dataset` runs
the same recipe in tf.data, with new A/B pairings and new masks every epoch.
"""

import collections

import numpy as np

Instance = collections.namedtuple(
    "Instance", ["input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "is_random_next"]
)


class InstanceMaker:
    """create_instances_from_document + create_masked_lm_predictions of the original, on ids.

    `special_ids` ([CLS], [SEP]) are never masked; `continuation` marks "##" pieces
    for whole-word masking. Random replacement draws from the whole vocabulary, as the
    original does.
    """

    def __init__(
        self,
        vocabulary,
        max_seq_length=128,
        short_seq_prob=0.1,
        masked_lm_prob=0.15,
        max_predictions_per_seq=20,
        whole_word_mask=False,
    ):
        self.vocab_size = len(vocabulary)
        index = {token: i for i, token in enumerate(vocabulary)}
        missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in index]
        if missing:
            raise ValueError(f"the vocabulary has no {missing} token(s)")
        self.cls_id, self.sep_id, self.mask_id = index["[CLS]"], index["[SEP]"], index["[MASK]"]
        self.continuation = [token.startswith("##") for token in vocabulary]
        if max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), got {max_seq_length}")
        self.max_seq_length = max_seq_length
        self.short_seq_prob = short_seq_prob
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions_per_seq = max_predictions_per_seq
        self.whole_word_mask = whole_word_mask

    def instances(self, documents, dupe_factor, rng, encode=None):
        """create_training_instances after reading: shuffle documents, dupe, shuffle instances.

        `encode` (e.g. to serialized records) is applied to each instance as it is made,
        so only the encoded form is held until the final shuffle, which depends only on
        the number of instances.
        """
        documents = list(documents)
        rng.shuffle(documents)
        instances = []
        for _ in range(dupe_factor):
            for index in range(len(documents)):
                made = self.from_document(documents, index, rng)
                instances.extend(made if encode is None else map(encode, made))
        rng.shuffle(instances)
        return instances

    def from_document(self, documents, document_index, rng):
        document = documents[document_index]
        max_num_tokens = self.max_seq_length - 3
        target_seq_length = max_num_tokens
        if rng.random() < self.short_seq_prob:
            target_seq_length = rng.randint(2, max_num_tokens)
        instances, chunk, length, i = [], [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target_seq_length:
                if chunk:
                    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    tokens_a = [t for segment in chunk[:a_end] for t in segment]
                    tokens_b = []
                    if len(chunk) == 1 or rng.random() < 0.5:
                        is_random_next = True
                        target_b_length = target_seq_length - len(tokens_a)
                        for _ in range(10):
                            random_index = rng.randint(0, len(documents) - 1)
                            if random_index != document_index:
                                break
                        random_document = documents[random_index]
                        for segment in random_document[rng.randint(0, len(random_document) - 1) :]:
                            tokens_b.extend(segment)
                            if len(tokens_b) >= target_b_length:
                                break
                        i -= len(chunk) - a_end  # put the unused sentences back
                    else:
                        is_random_next = False
                        tokens_b = [t for segment in chunk[a_end:] for t in segment]
                    truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                    input_ids = [self.cls_id, *tokens_a, self.sep_id, *tokens_b, self.sep_id]
                    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                    input_ids, positions, labels = self.mask(input_ids, rng)
                    instances.append(Instance(input_ids, segment_ids, positions, labels, is_random_next))
                chunk, length = [], 0
            i += 1
        return instances

    def mask(self, input_ids, rng):
        """(masked ids, sorted positions, original ids at those positions)."""
        num_to_predict = min(self.max_predictions_per_seq, max(1, int(round(len(input_ids) * self.masked_lm_prob))))
        if self.whole_word_mask:
            chosen = self._whole_words(input_ids, num_to_predict, rng)
        else:
            # Single positions: the original's loop takes the first num_to_predict of them.
            candidates = [i for i, token in enumerate(input_ids) if token != self.cls_id and token != self.sep_id]
            shuffle(candidates, rng)
            chosen = candidates[:num_to_predict]
        output = list(input_ids)
        for index in chosen:
            if rng.random() < 0.8:
                output[index] = self.mask_id
            elif rng.random() >= 0.5:
                output[index] = rng.randint(0, self.vocab_size - 1)
        masked = sorted(chosen)
        return output, masked, [input_ids[i] for i in masked]

    def _whole_words(self, input_ids, num_to_predict, rng):
        """Positions of whole words (a piece and its ## continuations) in random order, up to `num_to_predict`."""
        candidates = []
        for i, token in enumerate(input_ids):
            if token == self.cls_id or token == self.sep_id:
                continue
            if candidates and self.continuation[token]:
                candidates[-1].append(i)
            else:
                candidates.append([i])
        shuffle(candidates, rng)
        # The original also skips sets overlapping masked positions; the sets are disjoint.
        chosen = []
        for index_set in candidates:
            if len(chosen) >= num_to_predict:
                break
            if len(chosen) + len(index_set) <= num_to_predict:
                chosen.extend(index_set)
        return chosen


def shuffle(items, rng):
    """`rng.shuffle(items)`: the same draws (CPython's Fisher-Yates on `getrandbits`), twice as fast.

    The tests hold it to `random.Random.shuffle`.
    """
    getrandbits = rng.getrandbits
    i = len(items) - 1
    while i > 0:
        bits = (i + 1).bit_length()
        lowest = max((1 << (bits - 1)) - 1, 1)  # the i below this one draw with fewer bits
        for i in range(i, lowest - 1, -1):  # noqa: B020 (i continues below the loop)
            j = getrandbits(bits)
            while j > i:
                j = getrandbits(bits)
            items[i], items[j] = items[j], items[i]
        i = lowest - 1


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Cuts the longer segment, one token at a time from its front or back at random.

    The original's draws, one per token cut; the cuts themselves are made once at the
    end, so a huge segment (a very long line) costs time linear in its length.
    """
    length = [len(tokens_a), len(tokens_b)]
    front, back = [0, 0], [0, 0]
    while length[0] + length[1] > max_num_tokens:
        longer = 0 if length[0] > length[1] else 1
        if rng.random() < 0.5:
            front[longer] += 1
        else:
            back[longer] += 1
        length[longer] -= 1
    for tokens, cut_front, cut_back in ((tokens_a, front[0], back[0]), (tokens_b, front[1], back[1])):
        del tokens[len(tokens) - cut_back :]
        del tokens[:cut_front]


def check_fits(instance, max_seq_length, max_predictions_per_seq):
    """(tokens, predictions) of an instance, which must fit the padded features."""
    n, p = len(instance.input_ids), len(instance.masked_lm_positions)
    if n > max_seq_length or p > max_predictions_per_seq:
        raise ValueError(
            f"instance of {n} tokens / {p} predictions exceeds {max_seq_length} / {max_predictions_per_seq}"
        )
    return n, p


def instance_features(instance, max_seq_length, max_predictions_per_seq):
    """An instance -> padded numpy arrays under the original feature names."""
    n, p = check_fits(instance, max_seq_length, max_predictions_per_seq)

    def pad(values, size, dtype):
        array = np.zeros(size, dtype)
        array[: len(values)] = values
        return array

    return {
        "input_ids": pad(instance.input_ids, max_seq_length, np.int64),
        "input_mask": pad([1] * n, max_seq_length, np.int64),
        "segment_ids": pad(instance.segment_ids, max_seq_length, np.int64),
        "masked_lm_positions": pad(instance.masked_lm_positions, max_predictions_per_seq, np.int64),
        "masked_lm_ids": pad(instance.masked_lm_ids, max_predictions_per_seq, np.int64),
        "masked_lm_weights": pad([1.0] * p, max_predictions_per_seq, np.float32),
        "next_sentence_labels": np.array([1 if instance.is_random_next else 0], np.int64),
    }

"""What each model answers to a serving request, as graph functions.

For every model type, `serving_functions` gives two functions that run inside the
exported graph: `from_text(texts)` (a list of `[batch]` tf.string segment tensors) and
`from_ids(packed)` (the packed int32 dict). Both return a dict of named outputs, all
floats as float32. Span answers and word tags are mapped back to the request text
through the tokenizer's byte offsets, so clients get text, not token ids.

With a dynamic-length preprocessor (`seq_length=None`), `from_text` runs the model on
length-sorted micro-batches (`length_sorted`): a request's texts differ in length, and
padding them all to the longest wastes most of the work on the short ones.
"""

import functools

import tensorflow as tf

from bert_keras.encoder import INPUT_NAMES, BertEncoder

MAX_ANSWER_TOKENS = 30  # the original run_squad's max_answer_length
NEG_INF = -1e9
MIN_MICRO_BATCH = 8  # rows; smaller matmuls lose more speed than padding costs


def _float32(tensor):
    return tf.cast(tensor, tf.float32) if tensor.dtype.is_floating else tensor


def serving_functions(model, preprocessor, labels=None, top_k=5, micro_batches=4):
    """(from_text, from_ids) for a `BertEncoder`, classifier, token classifier, span
    labeler or pre-training model.

    `micro_batches`: how many length-sorted micro-batches `from_text` splits a large
    request into when the preprocessor pads dynamically (1: one padded batch).
    `from_ids` always runs the packed inputs as given.
    """
    from bert_keras.classifier import BertClassifier
    from bert_keras.pretrainer import BertPretrainer
    from bert_keras.span_labeler import BertSpanLabeler
    from bert_keras.token_classifier import BertTokenClassifier

    if micro_batches < 1:
        raise ValueError(f"micro_batches must be at least 1, got {micro_batches}")
    run = lambda packed: model(packed, training=False)  # noqa: E731
    run_text = run
    if preprocessor.packer.seq_length is None and micro_batches > 1:
        per_token = (
            (BertEncoder, ("sequence_output", "encoder_outputs")),
            (BertTokenClassifier, None),  # its output is one per-token tensor
            (BertSpanLabeler, ("start_logits", "end_logits")),
        )
        token_outputs = next((keys for kind, keys in per_token if isinstance(model, kind)), ())
        run_text = lambda packed: length_sorted(run, packed, token_outputs, micro_batches)  # noqa: E731

    label_table = None if labels is None else tf.constant(list(labels))
    if isinstance(model, BertEncoder):
        outputs = encoder_outputs
    elif isinstance(model, BertClassifier):
        if labels is not None and model.num_classes != 1 and len(labels) != model.num_classes:
            raise ValueError(f"{len(labels)} labels for a classifier of {model.num_classes} classes")
        outputs = functools.partial(classifier_outputs, num_classes=model.num_classes, label_table=label_table)
    elif isinstance(model, BertTokenClassifier):
        if labels is not None and len(labels) != model.num_classes:
            raise ValueError(f"{len(labels)} labels for a tagger of {model.num_classes} tags")
        return (
            lambda texts: tagger_outputs(run_text, preprocessor, texts, label_table),
            lambda packed: {"logits": _float32(run(packed))},
        )
    elif isinstance(model, BertSpanLabeler):
        return (
            lambda texts: span_outputs(run_text, preprocessor, texts),
            lambda packed: {k: _float32(v) for k, v in run(packed).items()},
        )
    elif isinstance(model, BertPretrainer):
        return (
            lambda texts: fill_mask_outputs(run_text, preprocessor, texts, top_k),
            lambda packed: fill_mask_from_packed(run, preprocessor.tokenizer, packed, top_k),
        )
    else:
        raise TypeError(f"no serving outputs defined for {type(model).__name__}")
    return (
        lambda texts: outputs(run_text, preprocessor(list(texts))),
        lambda packed: outputs(run, packed),
    )


def length_sorted(run, packed, token_outputs, micro_batches):
    """`run(packed)`, computed on length-sorted micro-batches each cut to its longest row.

    The rows are sorted by length and split into `micro_batches` slices of at least
    MIN_MICRO_BATCH rows; each slice drops the padding columns none of its rows need.
    A row's outputs depend only on its own tokens (padding gets exactly zero attention
    weight), so they equal those of one padded batch to float round-off. Outputs come
    back in request order; per-token ones (`token_outputs`: the keys of such outputs, or
    None when the output is one per-token tensor) are zero-padded to the batch length.
    Inputs other than the packed ids (e.g. `masked_lm_positions`) are only reordered.
    """
    mask = packed["input_mask"]
    batch, length = tf.shape(mask)[0], tf.shape(mask)[1]
    order = tf.argsort(tf.reduce_sum(mask, axis=1), stable=True)
    rows = {name: tf.gather(tensor, order) for name, tensor in packed.items()}
    lengths = tf.reduce_sum(rows["input_mask"], axis=1)
    size = tf.maximum(MIN_MICRO_BATCH, -(-batch // micro_batches))
    count = tf.maximum(1, -(-batch // size))

    def run_slice(index):
        start = index * size
        end = tf.minimum(start + size, batch)
        longest = tf.reduce_max(tf.concat([lengths[start:end], [1]], axis=0))
        piece = {
            name: tensor[start:end, :longest] if name in INPUT_NAMES else tensor[start:end]
            for name, tensor in rows.items()
        }
        outputs = run(piece)
        pad = lambda tensor: _pad_tokens(tensor, length)  # noqa: E731
        if token_outputs is None:
            padded = pad(outputs)
        elif token_outputs:
            padded = {
                key: tf.nest.map_structure(pad, value) if key in token_outputs else value
                for key, value in outputs.items()
            }
        else:
            padded = outputs
        return outputs, tf.nest.flatten(padded)

    def append_slice(index, done):
        return index + 1, [tf.concat([tensor, new], 0) for tensor, new in zip(done, run_slice(index)[1])]

    # The first slice runs outside the loop: it fixes the outputs' structure and dtypes.
    structure, first = run_slice(0)
    any_rows = [tf.TensorShape([None]).concatenate(tensor.shape[1:]) for tensor in first]
    _, flat = tf.while_loop(
        lambda index, _: index < count, append_slice, (tf.constant(1), first),
        shape_invariants=(tf.TensorShape([]), any_rows), parallel_iterations=1,
    )
    restore = tf.math.invert_permutation(order)
    return tf.nest.pack_sequence_as(structure, [tf.gather(tensor, restore) for tensor in flat])


def _pad_tokens(tensor, length):
    """Zero-pads axis 1 of a per-token output to `length`."""
    padding = [[0, 0], [0, length - tf.shape(tensor)[1]]] + [[0, 0]] * (len(tensor.shape) - 2)
    return tf.pad(tensor, padding)


def encoder_outputs(run, packed):
    outputs = run(packed)
    return {
        "pooled_output": _float32(outputs["pooled_output"]),
        "sequence_output": _float32(outputs["sequence_output"]),
        "input_mask": packed["input_mask"],
    }


def classifier_outputs(run, packed, num_classes, label_table):
    logits = _float32(run(packed))
    if num_classes == 1:
        return {"score": logits[:, 0]}
    label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
    outputs = {"logits": logits, "probabilities": tf.nn.softmax(logits), "label_ids": label_ids}
    if label_table is not None:
        outputs["labels"] = tf.gather(label_table, label_ids)
    return outputs


def tagger_outputs(run, preprocessor, texts, label_table):
    """One tag per word of the text: the prediction at each word's first piece.

    Words are the original tokenizer's (whitespace and punctuation split). Outputs are
    padded to the batch's most words: `words` (text, "" as padding), `tag_ids` (-1 as
    padding), `tags` (with labels), `tag_probabilities` and `num_words`.
    """
    (text,) = texts
    tokenizer = preprocessor.tokenizer
    ids, starts, ends = tokenizer.tokenize_with_offsets(text)
    packed = preprocessor.packer([ids])
    logits = _float32(run(packed))
    kept_pieces = tf.reduce_sum(packed["input_mask"], axis=1) - 2
    word_first = _word_edge(tokenizer.words_from_pieces(ids, tf.ragged.range(ids.row_lengths())), first=True)
    word_start = _word_edge(tokenizer.words_from_pieces(ids, starts), first=True)
    word_end = _word_edge(tokenizer.words_from_pieces(ids, ends), first=False)
    in_window = word_first < tf.cast(kept_pieces, word_first.dtype)[:, None]
    word_first = tf.ragged.boolean_mask(word_first, in_window)
    word_start = tf.ragged.boolean_mask(word_start, in_window)
    word_end = tf.ragged.boolean_mask(word_end, in_window)
    rows = tf.cast(word_first.value_rowids(), tf.int32)
    positions = tf.stack([rows, tf.cast(word_first.flat_values, tf.int32) + 1], axis=1)
    word_probs = tf.nn.softmax(tf.gather_nd(logits, positions))
    tag_ids = word_first.with_flat_values(tf.argmax(word_probs, axis=-1, output_type=tf.int32))
    words = word_first.with_flat_values(
        tf.strings.substr(
            tf.gather(text, rows), word_start.flat_values, word_end.flat_values - word_start.flat_values,
            unit="BYTE",
        )
    )
    outputs = {
        "words": words.to_tensor(default_value=""),
        "tag_ids": tag_ids.to_tensor(default_value=-1),
        "tag_probabilities": word_first.with_flat_values(tf.reduce_max(word_probs, axis=-1)).to_tensor(),
        "num_words": tf.cast(word_first.row_lengths(), tf.int32),
    }
    if label_table is not None:
        outputs["tags"] = tag_ids.with_flat_values(tf.gather(label_table, tag_ids.flat_values)).to_tensor(
            default_value=""
        )
    return outputs


def _word_edge(words, first):
    """[B, (words), (pieces)] -> [B, (words)]: each word's first or last piece value."""
    pieces = words.values
    index = pieces.row_starts() if first else pieces.row_limits() - 1
    return words.with_values(tf.gather(pieces.flat_values, index))


def span_outputs(run, preprocessor, texts):
    """The best answer span in the context: text, byte offsets, score, and the [CLS]
    no-answer score (answer when `score` beats it by your SQuAD v2.0 threshold).

    The span maximises start + end logits over context tokens with end >= start and at
    most 30 tokens, as the original's decoding within one window.
    """
    question, context = texts
    tokenizer = preprocessor.tokenizer
    question_ids = tokenizer(question)
    context_ids, starts, ends = tokenizer.tokenize_with_offsets(context)
    packed = preprocessor.packer([question_ids, context_ids])
    logits = run(packed)
    start_logits, end_logits = _float32(logits["start_logits"]), _float32(logits["end_logits"])
    length = tf.shape(start_logits)[1]
    is_context = tf.logical_and(packed["input_type_ids"] == 1, packed["input_mask"] == 1)
    # The last context position is the final [SEP]: not part of any answer.
    total = tf.reduce_sum(packed["input_mask"], axis=1)
    is_context &= tf.range(length)[None, :] < (total - 1)[:, None]
    start_scores = tf.where(is_context, start_logits, NEG_INF)
    end_scores = tf.where(is_context, end_logits, NEG_INF)
    pair_scores = start_scores[:, :, None] + end_scores[:, None, :]
    offsets = tf.range(length)[None, :] - tf.range(length)[:, None]  # end - start
    allowed = (offsets >= 0) & (offsets < MAX_ANSWER_TOKENS)
    pair_scores = tf.where(allowed[None], pair_scores, 2 * NEG_INF)
    best = tf.argmax(tf.reshape(pair_scores, [tf.shape(pair_scores)[0], -1]), axis=1, output_type=tf.int32)
    start, end = best // length, best % length
    score = tf.reduce_max(tf.reshape(pair_scores, [tf.shape(pair_scores)[0], -1]), axis=1)
    # Packed position -> context piece: after [CLS], the kept question and its [SEP].
    context_first = tf.argmax(tf.cast(is_context, tf.int32), axis=1, output_type=tf.int32)
    has_context = tf.reduce_any(is_context, axis=1)
    start_piece = tf.cast(start - context_first, tf.int64)
    end_piece = tf.cast(end - context_first, tf.int64)
    safe_start = tf.where(has_context, start_piece, 0)
    safe_end = tf.where(has_context, end_piece, 0)
    row_starts = context_ids.row_starts()
    padded_starts = tf.concat([starts.flat_values, [0]], 0)
    padded_ends = tf.concat([ends.flat_values, [0]], 0)
    last = tf.size(starts.flat_values, out_type=tf.int64)
    start_byte = tf.gather(padded_starts, tf.where(has_context, row_starts + safe_start, last))
    end_byte = tf.gather(padded_ends, tf.where(has_context, row_starts + safe_end, last))
    return {
        "answer": tf.strings.substr(context, start_byte, end_byte - start_byte, unit="BYTE"),
        "answer_start_byte": start_byte,
        "answer_end_byte": end_byte,
        "score": tf.where(has_context, score, NEG_INF),
        "no_answer_score": start_logits[:, 0] + end_logits[:, 0],
    }


def fill_mask_outputs(run, preprocessor, texts, top_k):
    """Top-k fillers for each literal `[MASK]` in the text.

    The tokenizer reads `[MASK]` as plain text, as the original does, so the text is
    cut at each `[MASK]`, the pieces tokenized and the mask id put between them.
    """
    (text,) = texts
    tokenizer = preprocessor.tokenizer
    parts = tf.strings.split(text, sep=tokenizer.mask_token)
    part_ids = tokenizer(parts.flat_values)
    mask = tf.fill([tf.size(parts.flat_values), 1], tf.constant(tokenizer.mask_id, part_ids.dtype))
    with_mask = tf.concat([part_ids, tf.RaggedTensor.from_tensor(mask)], axis=1)
    # Drop the mask after each text's last part.
    is_last = tf.equal(tf.range(tf.size(parts.flat_values, out_type=tf.int64)) + 1,
                       tf.gather(parts.row_limits(), parts.value_rowids()))
    keep = tf.logical_not(tf.logical_and(
        is_last[:, None], tf.equal(tf.ragged.range(with_mask.row_lengths()), with_mask.row_lengths()[:, None] - 1)
    ))
    with_mask = tf.ragged.boolean_mask(with_mask, keep)
    ids = parts.with_flat_values(with_mask).merge_dims(1, 2)
    return fill_mask_from_packed(run, tokenizer, preprocessor.packer([ids]), top_k)


def fill_mask_from_packed(run, tokenizer, packed, top_k):
    is_mask = tf.equal(packed["input_word_ids"], tokenizer.mask_id)
    positions = tf.ragged.boolean_mask(
        tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask
    )
    inputs = {**packed, "masked_lm_positions": positions.to_tensor(default_value=0)}
    probabilities = tf.nn.softmax(_float32(run(inputs)["mlm_logits"]))
    top_probabilities, top_ids = tf.math.top_k(probabilities, k=top_k)
    valid = tf.sequence_mask(positions.row_lengths(), tf.shape(top_ids)[1])[:, :, None]
    vocabulary = tf.constant(tokenizer.vocabulary)
    return {
        "mask_positions": tf.cast(positions.to_tensor(default_value=-1), tf.int32),
        "top_ids": tf.where(valid, top_ids, -1),
        "top_tokens": tf.where(valid, tf.gather(vocabulary, top_ids), ""),
        "top_probabilities": tf.where(valid, top_probabilities, 0.0),
    }

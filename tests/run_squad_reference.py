"""The original run_squad.py's windows in plain Python, the reference the graph ops of
`bert_keras.text.windows` are tested against: its `while start_offset < len(all_doc_tokens)`
loop of doc spans, `_check_is_max_context`, and run_classifier's `_truncate_seq_pair`."""


def run_squad_spans(num_tokens, max_tokens_for_doc, doc_stride):
    """run_squad.py's doc spans: (start, length) of each window."""
    spans = []
    start_offset = 0
    while start_offset < num_tokens:
        length = num_tokens - start_offset
        if length > max_tokens_for_doc:
            length = max_tokens_for_doc
        spans.append((start_offset, length))
        if start_offset + length == num_tokens:
            break
        start_offset += min(length, doc_stride)
    return spans or [(0, 0)]  # run_squad makes no span of an empty document; ours has one, empty


def check_is_max_context(doc_spans, cur_span_index, position):
    """run_squad.py's `_check_is_max_context`, verbatim but for names."""
    best_score = None
    best_span_index = None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start:
            continue
        if position > end:
            continue
        num_left_context = position - start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def truncated_pair_lengths(length_a, length_b, max_length):
    """run_classifier's `_truncate_seq_pair`: pop from the longer (ties: the second)."""
    while length_a + length_b > max_length:
        if length_a > length_b:
            length_a -= 1
        else:
            length_b -= 1
    return length_a, length_b

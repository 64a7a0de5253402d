"""Attention biases from padding masks and packed rows, and positions within packed sequences."""

import tensorflow as tf


def attention_bias(input_mask, packed_sequence_ids=None):
    """[B, L] 0/1 padding mask -> float32 [B, 1, 1, L] bias added to attention scores.

    With `packed_sequence_ids` (int [B, L]: k >= 1 on the tokens of a row's k-th packed
    sequence, 0 on padding), [B, 1, L, L]: each token attends only to the tokens of its
    own sequence, so sequences packed in one row do not see each other."""
    # expand_dims, not [:, None, None, :]: LiteRT has no kernel for a strided slice that adds axes.
    keep = tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)
    if packed_sequence_ids is None:
        return (1.0 - keep) * -1e9
    ids = tf.cast(packed_sequence_ids, tf.int32)
    same = tf.cast(tf.equal(ids[:, :, None], ids[:, None, :]), tf.float32)[:, None]
    return (1.0 - same * keep) * -1e9


def packed_position_ids(packed_sequence_ids):
    """int [B, L] -> each token's position within its own packed sequence (0 at its
    [CLS]); padding keeps its index. Sequence k must fill one span, after sequence k-1."""
    ids = tf.cast(packed_sequence_ids, tf.int32)
    earlier = (ids[:, None, :] > 0) & (ids[:, None, :] < ids[:, :, None])  # [B, i, j]: j in an earlier sequence
    return tf.range(tf.shape(ids)[1])[None, :] - tf.reduce_sum(tf.cast(earlier, tf.int32), axis=2)

"""Losses for training sentence embeddings, as sentence-transformers defines them, with
the in-batch candidates gathered across `tf.distribute` replicas.

Both take `y_pred` = embeddings `[batch, columns, H]` (column 0 the anchors or first
texts, then positives / second texts, then hard negatives). Under a strategy with N
replicas each replica scores its own rows against the candidates of all replicas
(`ReplicaContext.all_gather`, whose gradient returns each replica its share), so with
Keras' per-replica loss scaling N replicas train exactly as one device on the global
batch.
"""

import keras
import tensorflow as tf

# Text fingerprints (see `text_fingerprints`) are float32 targets: Keras casts `y_true`
# to the loss dtype, which holds integers below 2**24 exactly. 0 means "unknown".
FINGERPRINT_BUCKETS = 2**24 - 1
MASKED = -1e9


def text_fingerprints(texts):
    """float32 fingerprints `[batch, columns]` of string columns, 1..2**24-1: equal texts
    get equal values, so a duplicate in the batch is not scored as a negative. Distinct
    texts collide with probability 2**-24 per pair; a collision hides one true negative
    from the loss, never makes a false one."""
    columns = [tf.strings.to_hash_bucket_fast(column, FINGERPRINT_BUCKETS) + 1 for column in texts]
    return tf.cast(tf.stack(columns, axis=1), tf.float32)


def gather_across_replicas(*tensors):
    """(the tensors concatenated over replicas along axis 0, this replica's first row
    in them); unchanged outside a multi-replica strategy."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensors, 0
    gathered = tuple(context.all_gather(tensor, axis=0) for tensor in tensors)
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return gathered, replica * tf.shape(tensors[0])[0]


def _cosine(a, b):
    return tf.matmul(
        tf.math.l2_normalize(a, axis=-1, epsilon=1e-24),
        tf.math.l2_normalize(b, axis=-1, epsilon=1e-24),
        transpose_b=True,
    )


def _ranking_loss(scores, labels, same_text):
    """Softmax cross-entropy of rows of `scores` against column `labels`, with the
    columns that repeat the row's texts (`same_text`, the label excepted) left out."""
    keep_label = tf.one_hot(labels, tf.shape(scores)[1], on_value=True, off_value=False)
    scores = tf.where(same_text & ~keep_label, MASKED, scores)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=scores)


@keras.saving.register_keras_serializable(package="bert_keras")
class MultipleNegativesRankingLoss(keras.losses.Loss):
    """In-batch negatives (sentence-transformers' MultipleNegativesRankingLoss): each
    anchor's positive must outscore, under a softmax over cosine * `scale`, every other
    positive and every hard negative in the global batch. `symmetric` adds the positive
    -> anchors direction and averages the two (MultipleNegativesSymmetricRankingLoss).

    `y_true`: `text_fingerprints` of the columns `[batch, columns]` (what raw-text `fit`
    passes) or zeros; candidates whose text equals the anchor's or its positive's are
    not counted as negatives. Returns one loss per anchor.
    """

    def __init__(self, scale=20.0, symmetric=False, name="multiple_negatives_ranking", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.symmetric = bool(symmetric)

    def call(self, y_true, y_pred):
        y_pred = tf.cast(y_pred, tf.float32)
        fingerprints = tf.zeros(tf.shape(y_pred)[:2]) if y_true is None else tf.cast(y_true, tf.float32)
        fingerprints = tf.broadcast_to(fingerprints, tf.shape(y_pred)[:2])
        anchors, candidates = y_pred[:, 0], y_pred[:, 1:]
        (all_anchors, all_candidates, all_prints), offset = gather_across_replicas(anchors, candidates, fingerprints)
        batch = tf.shape(anchors)[0]
        labels = offset + tf.range(batch)
        # Candidates in sentence-transformers' order: all positives, then each negative column.
        flat_candidates = tf.reshape(tf.transpose(all_candidates, [1, 0, 2]), [-1, tf.shape(y_pred)[2]])
        candidate_prints = tf.reshape(tf.transpose(all_prints[:, 1:]), [-1])
        own = tf.gather(all_prints, labels)  # [batch, columns]: this replica's rows

        def same(rows, columns):
            """[rows, candidates]: candidate text equals the row's anchor or positive."""
            known = columns[None, :] > 0
            return known & ((columns[None, :] == rows[:, 0:1]) | (columns[None, :] == rows[:, 1:2]))

        forward = _ranking_loss(self.scale * _cosine(anchors, flat_candidates), labels, same(own, candidate_prints))
        if not self.symmetric:
            return forward
        backward = _ranking_loss(
            self.scale * _cosine(candidates[:, 0], all_anchors), labels, same(own, all_prints[:, 0])
        )
        return (forward + backward) / 2

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "symmetric": self.symmetric}


@keras.saving.register_keras_serializable(package="bert_keras")
class CoSENTLoss(keras.losses.Loss):
    """Scored pairs (STS-style), sentence-transformers' CoSENTLoss: for every two pairs
    of the global batch where one has the higher score, log(1 + sum exp(scale *
    (cos_lower - cos_higher))). `y_true`: scores `[batch]`; `y_pred` `[batch, 2, H]`.

    The loss is one value for the batch; each row carries it, so Keras' mean over rows
    (and over replicas) is that value."""

    def __init__(self, scale=20.0, name="cosent", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        y_pred = tf.cast(y_pred, tf.float32)
        a = tf.math.l2_normalize(y_pred[:, 0], axis=-1, epsilon=1e-24)
        b = tf.math.l2_normalize(y_pred[:, 1], axis=-1, epsilon=1e-24)
        scores = self.scale * tf.reduce_sum(a * b, axis=-1)
        labels = tf.reshape(tf.cast(y_true, tf.float32), [-1])
        (scores, labels), _ = gather_across_replicas(scores, labels)
        differences = scores[:, None] - scores[None, :]
        differences = tf.where(labels[:, None] < labels[None, :], differences, MASKED)
        loss = tf.reduce_logsumexp(tf.concat([[0.0], tf.reshape(differences, [-1])], axis=0))
        return tf.fill(tf.shape(y_pred)[:1], loss)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}

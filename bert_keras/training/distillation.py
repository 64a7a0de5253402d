"""Losses for knowledge distillation (Hinton et al. 2015; DistilBERT; TinyBERT), as Keras
losses so that `model.fit` reduces them and scales them per `tf.distribute` replica like
any compiled loss.

Each takes the teacher's output as `y_true` and the student's as `y_pred`; padding is left
out by passing the input mask as `sample_weight` (their reduction is the weighted mean).
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="bert_keras")
class SoftTargetLoss(keras.losses.Loss):
    """KL divergence from the teacher's softmax at `temperature` to the student's,
    times `temperature**2` (Hinton et al.: the gradients keep their size as T grows).

    `y_true`, `y_pred`: logits `[..., K]`; one value per row (per token for taggers).
    """

    def __init__(self, temperature=2.0, name="soft_target", reduction="mean_with_sample_weight", **kwargs):
        super().__init__(name=name, reduction=reduction, **kwargs)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.temperature = float(temperature)

    def call(self, y_true, y_pred):
        teacher = tf.nn.log_softmax(tf.cast(y_true, tf.float32) / self.temperature, axis=-1)
        student = tf.nn.log_softmax(tf.cast(y_pred, tf.float32) / self.temperature, axis=-1)
        kl = tf.reduce_sum(tf.exp(teacher) * (teacher - student), axis=-1)
        return kl * self.temperature**2

    def get_config(self):
        return {**super().get_config(), "temperature": self.temperature}


@keras.saving.register_keras_serializable(package="bert_keras")
class FeatureMatchingLoss(keras.losses.Loss):
    """Mean squared error over the last axis: the student's vectors (hidden states,
    attention rows, sentence embeddings, regression scores) against the teacher's."""

    def __init__(self, name="feature_matching", reduction="mean_with_sample_weight", **kwargs):
        super().__init__(name=name, reduction=reduction, **kwargs)

    def call(self, y_true, y_pred):
        difference = tf.cast(y_pred, tf.float32) - tf.cast(y_true, tf.float32)
        return tf.reduce_mean(tf.square(difference), axis=-1)


def global_mean_weights(mask):
    """`mask` `[...]` divided by its sum over every `tf.distribute` replica: as the
    `sample_weight` of a loss reduced by "sum", the mean over all replicas' real tokens.
    (A per-replica mean would weigh each token by its own replica's count, so N replicas
    would not train as one device on the global batch.)"""
    mask = tf.stop_gradient(tf.cast(mask, tf.float32))
    total = tf.reduce_sum(mask)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, total)
    return mask / tf.maximum(total, 1.0)

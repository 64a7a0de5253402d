"""Training: optimizers and schedules, tf.distribute strategies, callbacks, and the reusable fine-tuning pieces."""

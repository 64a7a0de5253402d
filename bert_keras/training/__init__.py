"""Training: optimizers and schedules, tf.distribute strategies, and the reusable fine-tuning pieces."""

"""Training: optimizers and schedules, tf.distribute strategies, callbacks and progress
output, contrastive and distillation losses, and the reusable fine-tuning pieces."""

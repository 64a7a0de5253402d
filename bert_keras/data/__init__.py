"""Pre-training data: the original recipe, sharded and parallel (local processes or Apache
Beam), TFRecords, and dynamic masking in tf.data."""

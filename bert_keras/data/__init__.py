"""Pre-training data: the original recipe (`documents`, `instances`), made into TFRecords
shard by shard in local processes or on Apache Beam (`pretraining_shards`), dynamic masking
in tf.data (`dynamic_masking`), packing short instances into rows (`packing`), and the
batches a pre-training run reads (`pretraining_inputs`)."""

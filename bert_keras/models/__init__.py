"""BERT models with original (google-research/bert) weight names: the encoder, the
pre-training model, their one load/save path (`saving`), and copies in another dtype
(`dtype`: float32 checkpoints of mixed-precision runs, bfloat16 exports)."""

"""BERT models with original (google-research/bert) weight names: the encoder, the
pre-training model, and their one load/save path."""

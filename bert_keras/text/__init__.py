"""Text to BERT inputs: the in-graph WordPiece tokenizer, the packer, the preprocessor that
chains them, sliding windows over long documents, and vocabulary learning (words counted as
the tokenizer splits them, locally or on Apache Beam)."""

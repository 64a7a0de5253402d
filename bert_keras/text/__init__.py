"""Text to BERT inputs: the in-graph WordPiece tokenizer, the packer, the preprocessor that
chains them, and vocabulary learning."""

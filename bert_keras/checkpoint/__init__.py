"""Checkpoints in and out: the canonical weights every format goes through (`weights`),
the original TF1 layout (`tf1`), Hugging Face folders (`hf`), sentence-transformers
folders (`sentence_transformers`), the text files beside the weights (`text_files`:
vocab.txt, labels.txt, tokenizer_config.json), the model card of a Hugging Face folder
(`model_card`), and `read_checkpoint` (`reader`), which reads a checkpoint once into a
`Checkpoint` that every loader takes.

The package exports only what a user calls (docs/checkpoints.md lists it); the library
imports the rest from the submodules."""

from bert_keras.checkpoint.reader import Checkpoint, detect_format, read_checkpoint, write
from bert_keras.checkpoint.weights import get_original_weights, set_original_weights

__all__ = [
    "Checkpoint",
    "detect_format",
    "get_original_weights",
    "read_checkpoint",
    "set_original_weights",
    "write",
]

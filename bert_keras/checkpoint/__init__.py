"""Checkpoints in and out: the canonical weights every format goes through (`weights`),
the original TF1 layout (`tf1`), Hugging Face folders (`hf`), sentence-transformers
folders (`sentence_transformers`), the text files beside the weights (`text_files`:
vocab.txt, labels.txt, tokenizer_config.json), and `read_checkpoint` (`reader`), which
reads a checkpoint once into a `Checkpoint` that every loader takes."""

from bert_keras.checkpoint.hf import HF_CONFIG
from bert_keras.checkpoint.reader import (
    Checkpoint,
    detect_format,
    is_keras_file,
    read_checkpoint,
    write,
)
from bert_keras.checkpoint.sentence_transformers import (
    CROSS_ENCODER_ACTIVATIONS,
    ST_POOLING_MODES,
    activation_name,
    write_sentence_transformers,
)
from bert_keras.checkpoint.text_files import (
    LABELS,
    VOCAB,
    TokenizerSettings,
    read_labels,
    read_tokenizer_config,
    read_vocab,
    tokenizer_max_length,
    vocab_tokens,
    write_labels,
    write_tokenizer_config,
    write_vocab,
)
from bert_keras.checkpoint.tf1 import TF1_IGNORED, TF1_PREFIX, tf1_prefix, write_tf1
from bert_keras.checkpoint.weights import (
    HEAD_NAMES,
    POOLER_NAMES,
    Transposed,
    get_original_weights,
    set_original_weights,
)

__all__ = [
    "CROSS_ENCODER_ACTIVATIONS",
    "HEAD_NAMES",
    "HF_CONFIG",
    "LABELS",
    "POOLER_NAMES",
    "ST_POOLING_MODES",
    "TF1_IGNORED",
    "TF1_PREFIX",
    "VOCAB",
    "Checkpoint",
    "TokenizerSettings",
    "Transposed",
    "activation_name",
    "detect_format",
    "get_original_weights",
    "is_keras_file",
    "read_checkpoint",
    "read_labels",
    "read_tokenizer_config",
    "read_vocab",
    "set_original_weights",
    "tf1_prefix",
    "tokenizer_max_length",
    "vocab_tokens",
    "write",
    "write_labels",
    "write_sentence_transformers",
    "write_tf1",
    "write_tokenizer_config",
    "write_vocab",
]

"""Layers that make up BERT, each usable on its own."""

from bert_keras.layers.embeddings import BertEmbeddings
from bert_keras.layers.pooler import BertPooler
from bert_keras.layers.pretraining_heads import BertMaskedLMHead, BertNextSentenceHead
from bert_keras.layers.transformer import TransformerEncoderBlock

__all__ = ["BertEmbeddings", "BertMaskedLMHead", "BertNextSentenceHead", "BertPooler", "TransformerEncoderBlock"]

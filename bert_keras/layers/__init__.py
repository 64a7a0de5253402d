"""The layers of BERT, each usable on its own: embeddings, the Transformer encoder block,
the pooler and the pre-training heads, and what they share (the activations a config names,
attention biases for padded and packed rows, dropout with a named random algorithm, a
LayerNorm that runs fused)."""

from bert_keras.layers.embeddings import BertEmbeddings
from bert_keras.layers.pooler import BertPooler
from bert_keras.layers.pretraining_heads import BertMaskedLMHead, BertNextSentenceHead
from bert_keras.layers.transformer import TransformerEncoderBlock

__all__ = ["BertEmbeddings", "BertMaskedLMHead", "BertNextSentenceHead", "BertPooler", "TransformerEncoderBlock"]

"""The layers of BERT rebuild from their configs (`get_config` = constructor arguments)."""

import keras
import pytest

from bert_keras.layers import BertEmbeddings, BertPooler, TransformerEncoderBlock


@pytest.mark.parametrize(
    "layer",
    [
        BertEmbeddings(vocab_size=10, hidden_size=8, max_position_embeddings=6, dropout_rate=0.2),
        TransformerEncoderBlock(hidden_size=8, num_attention_heads=2, intermediate_size=16, hidden_act="gelu_tanh"),
        BertPooler(hidden_size=8),
    ],
)
def test_layers_serialise_through_get_config(layer):
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is type(layer)
    assert restored.get_config() == layer.get_config()

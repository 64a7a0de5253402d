"""The pooler: the [CLS] vector C through a dense layer and an activation (BERT's tanh)."""

import keras


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPooler(keras.layers.Layer):
    """Maps the first token's final hidden state to the pooled sequence representation."""

    def __init__(self, hidden_size, initializer_range=0.02, activation="tanh", **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.activation = activation
        self.dense = keras.layers.Dense(
            hidden_size,
            activation=activation,  # Keras' tanh, relu, gelu (exact)
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )

    def build(self, input_shape=None):
        self.dense.build((None, self.hidden_size))

    def call(self, sequence_output):
        return self.dense(sequence_output[:, 0])

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
            "activation": self.activation,
        }

"""The BERT encoder: embeddings, a stack of Transformer blocks and the pooler."""

import keras
import tensorflow as tf

from bert_keras.checkpoint.weights import HEAD_NAMES, POOLER_NAMES, set_original_weights
from bert_keras.compat import BuildsBeforeTracing, WorksAroundKeras20585
from bert_keras.config import BertConfig
from bert_keras.layers import BertEmbeddings, BertPooler, TransformerEncoderBlock
from bert_keras.layers.attention_mask import attention_bias, packed_position_ids
from bert_keras.models.recompute import recompute_gradient
from bert_keras.models.saving import load_checkpoint

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# Optional input of rows that pack several sequences (see `BertEncoder`).
PACKING_INPUT = "packed_sequence_ids"


@keras.saving.register_keras_serializable(package="bert_keras")
class BertEncoder(BuildsBeforeTracing, WorksAroundKeras20585, keras.Model):
    """Bidirectional Transformer encoder with the TF Hub BERT interface.

    Takes a dict of int `input_word_ids`, `input_mask`, `input_type_ids` [batch, seq]
    (any seq <= max_position_embeddings) and returns a dict with `sequence_output`
    [B, L, H], `pooled_output` [B, H], `encoder_outputs` (one [B, L, H] per layer) and,
    with `return_attention_probs=True`, `attention_probs` (one [B, heads, L, L] per layer).

    Build one from a `BertConfig` (`BertEncoder(BertConfig.preset("base"))`) or load a
    released checkpoint with `BertEncoder.from_checkpoint(path)`.

    Packed rows: with an extra int `packed_sequence_ids` [B, L] (k >= 1 on the tokens of
    the row's k-th sequence, each sequence one span with its own [CLS] and [SEP], 0 on
    padding), positions restart at 0 for every sequence and attention stays within a
    sequence, so each sequence's outputs are those it would get alone in a row
    (`pooled_output` is then the first sequence's).

    `recompute=True` keeps only each Transformer block's input in training and computes
    its activations again in the backward pass (`models.recompute`): about a third more
    compute for memory that no longer grows with the number of layers.
    """

    # Read by its export (`serving_tasks.EncoderSignature`), as a task head's (`BertTask`).
    text_input_names = ("text",)
    token_output_names = ("sequence_output", "encoder_outputs")

    def __init__(self, config=None, recompute=False, **kwargs):
        super().__init__(**kwargs)
        self.recompute = bool(recompute)
        if config is None:
            config = BertConfig()
        elif isinstance(config, dict):
            config = BertConfig.from_dict(config)
        elif not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig or a dict, got {type(config).__name__}")
        self.config = config
        self.vocab_path = None  # set by from_checkpoint when a vocab.txt sits beside the weights
        self.embeddings = BertEmbeddings(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            dropout_rate=config.hidden_dropout_prob,
            initializer_range=config.initializer_range,
            layer_norm_eps=config.layer_norm_eps,
            embedding_size=config.embedding_size,
            dtype=self.dtype_policy,
            name="embeddings",
        )
        self.transformer_blocks = [
            TransformerEncoderBlock(
                hidden_size=config.hidden_size,
                num_attention_heads=config.num_attention_heads,
                intermediate_size=config.intermediate_size,
                hidden_act=config.hidden_act,
                hidden_dropout_prob=config.hidden_dropout_prob,
                attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                initializer_range=config.initializer_range,
                layer_norm_eps=config.layer_norm_eps,
                dtype=self.dtype_policy,
                name=f"transformer_block_{i}",
            )
            for i in range(config.num_hidden_layers)
        ]
        self.pooler = BertPooler(
            config.hidden_size,
            initializer_range=config.initializer_range,
            activation=config.pooler_act,
            dtype=self.dtype_policy,
            name="pooler",
        )
        # Every weight's shape follows from the config, so build now: checkpoints can be
        # loaded before the first call and `.keras` files restore without a sample input.
        self.embeddings.build()
        for block in self.transformer_blocks:
            block.build()
        self.pooler.build()
        self.built = True

    def call(self, inputs, training=None, return_attention_probs=False, output_positions=None):
        """`output_positions` int [B, P]: run the last layer only at these positions (and
        at [CLS] for the pooler); `sequence_output` and the last of `encoder_outputs` are
        then [B, P, H] at those positions. This is what pre-training heads need, at a
        fraction of the last layer's cost."""
        input_word_ids, input_mask, input_type_ids, packed = self._checked_inputs(inputs)
        position_ids = None if packed is None else packed_position_ids(packed)
        hidden = self.embeddings(input_word_ids, input_type_ids, training=training, position_ids=position_ids)
        bias = attention_bias(input_mask, packed)
        query_positions = None
        if output_positions is not None:
            output_positions = tf.cast(output_positions, tf.int32)
            query_positions = tf.pad(output_positions, [[0, 0], [1, 0]])  # [CLS] first
        encoder_outputs, attention_probs = [], []
        last = len(self.transformer_blocks) - 1
        for index, block in enumerate(self.transformer_blocks):
            positions = query_positions if index == last else None
            if return_attention_probs:
                hidden, probs = block(
                    hidden, bias, training=training, return_attention_probs=True, query_positions=positions
                )
                attention_probs.append(probs)
            elif self.recompute and training:
                # The bias is not an input of the recomputed function: it needs no gradient.
                hidden = recompute_gradient(
                    lambda hidden, block=block, positions=positions: [
                        block(hidden, bias, training=True, query_positions=positions)
                    ],
                    block,
                )(hidden)[0]
            else:
                hidden = block(hidden, bias, training=training, query_positions=positions)
            encoder_outputs.append(hidden)
        pooled_output = self.pooler(hidden)
        if query_positions is not None:
            hidden = encoder_outputs[-1] = hidden[:, 1:]
        outputs = {
            "sequence_output": hidden,
            "pooled_output": pooled_output,
            "encoder_outputs": encoder_outputs,
        }
        if return_attention_probs:
            outputs["attention_probs"] = attention_probs
        return outputs

    def _checked_inputs(self, inputs):
        if not isinstance(inputs, dict):
            raise TypeError(f"BertEncoder takes a dict with keys {list(INPUT_NAMES)}, got {type(inputs).__name__}")
        missing = [name for name in INPUT_NAMES if name not in inputs]
        if missing:
            raise ValueError(f"BertEncoder inputs are missing {missing}; got keys {sorted(inputs)}")
        tensors = []
        names = INPUT_NAMES + ((PACKING_INPUT,) if PACKING_INPUT in inputs else ())
        for name in names:
            tensor = inputs[name]
            if not isinstance(tensor, (tf.Tensor, tf.Variable)) and not keras.ops.is_tensor(tensor):
                tensor = tf.convert_to_tensor(tensor)
            dtype = tf.as_dtype(tensor.dtype)
            if not dtype.is_integer:
                raise TypeError(f"BertEncoder input {name} must be an integer tensor, got {dtype.name}")
            if len(tensor.shape) != 2:
                raise ValueError(f"BertEncoder input {name} must be [batch, seq], got shape {tensor.shape}")
            tensors.append(tensor)
        shapes = {name: tuple(t.shape) for name, t in zip(names, tensors)}
        if not all(_compatible(shapes[INPUT_NAMES[0]], s) for s in shapes.values()):
            raise ValueError(f"BertEncoder inputs must all have the same shape, got {shapes}")
        seq_length = tensors[0].shape[1]
        if seq_length is not None and seq_length > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_length} exceeds max_position_embeddings="
                f"{self.config.max_position_embeddings}; truncate the inputs"
            )
        return tensors + [None] * (len(INPUT_NAMES) + 1 - len(tensors))

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "recompute": self.recompute}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @classmethod
    def from_checkpoint(cls, path, format=None, config=None, revision=None):
        """Loads an original TF1 checkpoint, a Hugging Face folder or a `.keras` file, or a
        Hugging Face Hub name (`ORG/NAME[@REVISION]`; `revision` pins one).

        Pre-training and task heads in the checkpoint are ignored (a missing pooler, as in
        BertForTokenClassification folders, starts new); `config` overrides
        the config file found beside the weights (e.g. to change dropout)."""
        return load_checkpoint(cls, path, format, config, revision=revision)

    @classmethod
    def from_original_weights(cls, weights, config, source="checkpoint"):
        """An encoder with canonical `{original name: array}` weights (`checkpoint.read_checkpoint`)."""
        encoder = cls(config)
        set_original_weights(
            encoder.original_weight_map(), weights, ignore=HEAD_NAMES, source=source, optional=POOLER_NAMES
        )
        return encoder

    def checkpoint_head(self):
        """None: a bare encoder has no head for `checkpoint.write` to record."""
        return None

    def reinitialize_top_layers(self, count):
        """Draws the top `count` Transformer blocks and the pooler (with `count` > 0) anew
        from their initializers: truncated normal of `initializer_range`, zero biases,
        LayerNorm scale 1 and offset 0. Zhang et al. (2021): the top layers of a pre-trained
        checkpoint are specialised to pre-training, and few-sample fine-tuning is more
        stable from fresh ones. The embeddings and the blocks below keep their weights."""
        layers = len(self.transformer_blocks)
        if not 0 <= count <= layers:
            raise ValueError(
                f"cannot re-initialise {count} layers (--reinit-layers, reinit_layers): "
                f"the encoder has {layers} Transformer layers"
            )
        for layer in [*self.transformer_blocks[layers - count :], self.pooler] if count else []:
            fresh = type(layer).from_config(layer.get_config())
            fresh.build()
            layer.set_weights(fresh.get_weights())

    def original_weight_map(self):
        """[(keras variable, [original names whose arrays concatenate along the last axis])]:
        the fused `qkv_kernel` is query, key and value side by side."""
        embeddings = self.embeddings
        spec = [
            (embeddings.word_embeddings, ["bert/embeddings/word_embeddings"]),
            (embeddings.token_type_embeddings, ["bert/embeddings/token_type_embeddings"]),
            (embeddings.position_embeddings, ["bert/embeddings/position_embeddings"]),
            (embeddings.layer_norm.gamma, ["bert/embeddings/LayerNorm/gamma"]),
            (embeddings.layer_norm.beta, ["bert/embeddings/LayerNorm/beta"]),
        ]
        if embeddings.token_type_embeddings is None:  # DistilBERT
            del spec[1]
        if embeddings.projection is not None:  # ELECTRA's embeddings_project
            spec += [
                (embeddings.projection.kernel, ["bert/embeddings_project/kernel"]),
                (embeddings.projection.bias, ["bert/embeddings_project/bias"]),
            ]
        for i, block in enumerate(self.transformer_blocks):
            layer = f"bert/encoder/layer_{i}"
            qkv = [f"{layer}/attention/self/{part}" for part in ("query", "key", "value")]
            spec += [
                (block.qkv_kernel, [f"{name}/kernel" for name in qkv]),
                (block.qkv_bias, [f"{name}/bias" for name in qkv]),
                (block.attention_output_kernel, [f"{layer}/attention/output/dense/kernel"]),
                (block.attention_output_bias, [f"{layer}/attention/output/dense/bias"]),
                (block.attention_layer_norm.gamma, [f"{layer}/attention/output/LayerNorm/gamma"]),
                (block.attention_layer_norm.beta, [f"{layer}/attention/output/LayerNorm/beta"]),
                (block.intermediate_kernel, [f"{layer}/intermediate/dense/kernel"]),
                (block.intermediate_bias, [f"{layer}/intermediate/dense/bias"]),
                (block.output_kernel, [f"{layer}/output/dense/kernel"]),
                (block.output_bias, [f"{layer}/output/dense/bias"]),
                (block.output_layer_norm.gamma, [f"{layer}/output/LayerNorm/gamma"]),
                (block.output_layer_norm.beta, [f"{layer}/output/LayerNorm/beta"]),
            ]
        spec += [
            (self.pooler.dense.kernel, ["bert/pooler/dense/kernel"]),
            (self.pooler.dense.bias, ["bert/pooler/dense/bias"]),
        ]
        return spec


def _compatible(a, b):
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def set_recompute(model, recompute=True):
    """Sets `recompute` on every `BertEncoder` in `model` (itself, or a layer at any
    depth: a task's encoder, a distiller's student); returns how many there are."""
    if isinstance(model, BertEncoder):
        model.recompute = bool(recompute)
        return 1
    return sum(set_recompute(layer, recompute) for layer in getattr(model, "layers", ()))

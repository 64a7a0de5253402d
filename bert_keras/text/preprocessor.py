"""Raw strings -> packed BERT inputs, with the TF Hub preprocess interface.

`BertPreprocessor` chains a `BertTokenizer` and a `BertPacker`. Besides
`__call__` it offers the methods of the TF Hub BERT preprocess models,
`tokenize(strings)`, `tokenize_with_offsets(strings)`,
`bert_pack_inputs(segments, seq_length)` and `get_special_tokens_dict()`, so
code written for those keeps working. It holds no Python-side state that changes at
call time, so it can be traced into `tf.data` maps and exported with
`keras.export.ExportArchive`.
"""

import keras

from bert_keras.compat import accept_raw_inputs
from bert_keras.text.packer import BertPacker
from bert_keras.text.tokenizer import BertTokenizer


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPreprocessor(keras.layers.Layer):
    """Tokenizes 1, 2 or N text segments and packs them.

    Args:
        tokenizer: a `BertTokenizer`.
        seq_length, truncation, max_seq_length, pad_to_multiple_of,
            bucket_boundaries: as for `BertPacker` (`seq_length=None` packs to
            a dynamic length).

    Call: `preprocessor(strings)` with one `tf.string` tensor `[batch]`, a
    tuple/list of them (one per segment), or a dict of them (segments in
    sorted key order, the order `tf.data` uses). Returns the dict of int32
    `input_word_ids`, `input_mask`, `input_type_ids` `[batch, seq_length]`.
    """

    def __init__(
        self,
        tokenizer,
        seq_length=128,
        truncation="longest_first",
        max_seq_length=512,
        pad_to_multiple_of=8,
        bucket_boundaries=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        accept_raw_inputs(self)
        self.built = True
        if not isinstance(tokenizer, BertTokenizer):
            raise TypeError(f"tokenizer must be a BertTokenizer, got {type(tokenizer).__name__}.")
        self.tokenizer = tokenizer
        self.packer = BertPacker(
            seq_length=seq_length,
            cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id,
            pad_id=tokenizer.pad_id,
            truncation=truncation,
            max_seq_length=max_seq_length,
            pad_to_multiple_of=pad_to_multiple_of,
            bucket_boundaries=bucket_boundaries,
        )

    def call(self, inputs):
        if isinstance(inputs, dict):
            inputs = [inputs[key] for key in sorted(inputs)]
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        return self.packer([self.tokenizer(segment) for segment in inputs])

    def tokenize(self, strings):
        """Strings `[batch]` -> int32 ids ragged `[batch, (words), (pieces)]`,
        as the TF Hub preprocess model's `tokenize`."""
        return self.tokenizer.words_from_pieces(self.tokenizer(strings))

    def tokenize_with_offsets(self, strings):
        """`tokenize` plus the byte offsets where each piece starts and ends, each
        ragged `[batch, (words), (pieces)]`, as the TF Hub `tokenize_with_offsets`."""
        ids, starts, ends = self.tokenizer.tokenize_with_offsets(strings)
        return tuple(self.tokenizer.words_from_pieces(ids, values) for values in (ids, starts, ends))

    def bert_pack_inputs(self, segments, seq_length=128):
        """A list of tokenized segments -> packed dict, as the TF Hub
        preprocess model's `bert_pack_inputs`. `seq_length`: a Python int, a
        scalar int tensor, or `None` (dynamic)."""
        return self.packer.pack(segments, seq_length)

    def get_special_tokens_dict(self):
        """Special token ids and the vocabulary size under the TF Hub names."""
        tokenizer = self.tokenizer
        return {
            "vocab_size": tokenizer.vocabulary_size,
            "start_of_sequence_id": tokenizer.cls_id,
            "end_of_segment_id": tokenizer.sep_id,
            "padding_id": tokenizer.pad_id,
            "mask_id": tokenizer.mask_id,
        }

    def get_config(self):
        config = super().get_config()
        packer = self.packer.get_config()
        config.update(
            {
                "tokenizer": keras.layers.serialize(self.tokenizer),
                **{
                    key: packer[key]
                    for key in ("seq_length", "truncation", "max_seq_length", "pad_to_multiple_of", "bucket_boundaries")
                },
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config["tokenizer"], dict):
            config["tokenizer"] = keras.layers.deserialize(config["tokenizer"])
        return cls(**config)

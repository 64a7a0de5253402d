"""bert-keras: BERT on TensorFlow 2 and Keras 3."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bert_keras.config import BertConfig  # noqa: E402
from bert_keras.encoder import BertEncoder  # noqa: E402
from bert_keras.packer import BertPacker  # noqa: E402
from bert_keras.preprocessor import BertPreprocessor  # noqa: E402
from bert_keras.tokenizer import BertTokenizer  # noqa: E402

__all__ = ["BertConfig", "BertEncoder", "BertPacker", "BertPreprocessor", "BertTokenizer"]
__version__ = "0.1.0"

"""bert-keras: BERT on TensorFlow 2 and Keras 3."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bert_keras.config import BertConfig  # noqa: E402
from bert_keras.encoder import BertEncoder  # noqa: E402

__all__ = ["BertConfig", "BertEncoder"]
__version__ = "0.1.0"

"""bert-keras: BERT on TensorFlow 2 and Keras 3."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bert_keras.classifier import BertClassifier  # noqa: E402
from bert_keras.config import BertConfig  # noqa: E402
from bert_keras.encoder import BertEncoder  # noqa: E402
from bert_keras.feature_extractor import BertFeatureExtractor  # noqa: E402
from bert_keras.multiple_choice import BertMultipleChoice  # noqa: E402
from bert_keras.optimization import LAMB, AdamWeightDecay, WarmupLinearDecay, create_optimizer  # noqa: E402
from bert_keras.packer import BertPacker  # noqa: E402
from bert_keras.preprocessor import BertPreprocessor  # noqa: E402
from bert_keras.pretrainer import BertPretrainer  # noqa: E402
from bert_keras.span_labeler import BertSpanLabeler  # noqa: E402
from bert_keras.task import BertTask  # noqa: E402
from bert_keras.token_classifier import BertTokenClassifier  # noqa: E402
from bert_keras.tokenizer import BertTokenizer  # noqa: E402

__all__ = [
    "AdamWeightDecay",
    "BertClassifier",
    "BertConfig",
    "BertEncoder",
    "BertFeatureExtractor",
    "BertMultipleChoice",
    "BertPacker",
    "BertPreprocessor",
    "BertPretrainer",
    "BertSpanLabeler",
    "BertTask",
    "BertTokenClassifier",
    "BertTokenizer",
    "LAMB",
    "WarmupLinearDecay",
    "create_optimizer",
]
__version__ = "0.1.0"

"""bert-keras: BERT on TensorFlow 2 and Keras 3.

The package's folders are its tiers, each importing only from those below it
(checked by import-linter, see pyproject.toml and docs/architecture.md):
`startup`/`compat` (TensorFlow's import, private Keras/TensorFlow hooks), `files`,
`config`/`checkpoint` (formats), `layers`, `text`, `models`, `training`, `tasks` and
`data`, `serving`; the `bert-keras` commands live in `pipelines/`.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bert_keras.startup import quiet_start_up  # noqa: E402

with quiet_start_up():  # TensorFlow's C++ start-up lines kept out (see bert_keras.startup)
    import tensorflow  # noqa: F401
    import tensorflow_text  # noqa: F401

from bert_keras.config import BertConfig  # noqa: E402
from bert_keras.models.encoder import BertEncoder  # noqa: E402
from bert_keras.models.pretrainer import BertPretrainer  # noqa: E402
from bert_keras.tasks.classifier import BertClassifier  # noqa: E402
from bert_keras.tasks.feature_extractor import BertFeatureExtractor  # noqa: E402
from bert_keras.tasks.multiple_choice import BertMultipleChoice  # noqa: E402
from bert_keras.tasks.reranker import BertReranker  # noqa: E402
from bert_keras.tasks.span_labeler import BertSpanLabeler  # noqa: E402
from bert_keras.tasks.task import BertTask  # noqa: E402
from bert_keras.tasks.text_embedder import BertTextEmbedder  # noqa: E402
from bert_keras.tasks.token_classifier import BertTokenClassifier  # noqa: E402
from bert_keras.text.packer import BertPacker  # noqa: E402
from bert_keras.text.preprocessor import BertPreprocessor  # noqa: E402
from bert_keras.text.tokenizer import BertTokenizer  # noqa: E402
from bert_keras.training.contrastive import CoSENTLoss, MultipleNegativesRankingLoss  # noqa: E402
from bert_keras.training.optimization import LAMB, AdamWeightDecay, WarmupLinearDecay, create_optimizer  # noqa: E402

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
    "BertReranker",
    "BertSpanLabeler",
    "BertTask",
    "BertTextEmbedder",
    "BertTokenClassifier",
    "BertTokenizer",
    "CoSENTLoss",
    "LAMB",
    "MultipleNegativesRankingLoss",
    "WarmupLinearDecay",
    "create_optimizer",
]
__version__ = "0.1.0"

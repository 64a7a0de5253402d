"""bert-keras: BERT on TensorFlow 2 and Keras 3.

The package's folders are its tiers, each importing only from those below it
(checked by import-linter, see pyproject.toml and docs/architecture.md), from the bottom:
`compat` (private Keras/TensorFlow hooks), `files` and `run_identity`, `config`, `hub`
(Hub names), `checkpoint` (formats), `layers`, `text`, `models`, `training`, `tasks` and
`data`, `datasets`, `serving` and `recipes`; the `bert-keras` commands live in `pipelines/`.
Importing it sets no environment variable and registers only its own layers, models and
heads with Keras (for `.keras` loading).
"""

import keras

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        f"bert_keras runs on Keras' TensorFlow backend, but Keras {keras.version()} is set to "
        f"{keras.backend.backend()!r} (KERAS_BACKEND or ~/.keras/keras.json): set KERAS_BACKEND=tensorflow"
    )

from bert_keras.config import BertConfig
from bert_keras.models.encoder import BertEncoder
from bert_keras.models.pretrainer import BertPretrainer
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.feature_extractor import BertFeatureExtractor
from bert_keras.tasks.feature_tagger import BertFeatureTagger
from bert_keras.tasks.multiple_choice import BertMultipleChoice
from bert_keras.tasks.reranker import BertReranker
from bert_keras.tasks.span_labeler import BertSpanLabeler
from bert_keras.tasks.task import BertTask
from bert_keras.tasks.text_embedder import BertTextEmbedder
from bert_keras.tasks.token_classifier import BertTokenClassifier
from bert_keras.text.packer import BertPacker
from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.text.tokenizer import BertTokenizer
from bert_keras.training.contrastive import CoSENTLoss, MultipleNegativesRankingLoss
from bert_keras.training.distillation import FeatureMatchingLoss, SoftTargetLoss
from bert_keras.training.optimization import LAMB, AdamWeightDecay, WarmupLinearDecay, create_optimizer

__all__ = [
    "AdamWeightDecay",
    "BertClassifier",
    "BertConfig",
    "BertEncoder",
    "BertFeatureExtractor",
    "BertFeatureTagger",
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
    "FeatureMatchingLoss",
    "LAMB",
    "MultipleNegativesRankingLoss",
    "SoftTargetLoss",
    "WarmupLinearDecay",
    "create_optimizer",
]
__version__ = "0.1.0"

"""The training runs of the `bert-keras` commands, for Keras scripts: `pretrain` and `finetune`."""

from bert_keras.recipes.finetuning import FinetuningRun, finetune
from bert_keras.recipes.pretraining import PretrainingPhase, PretrainingRun, pretrain

__all__ = ["FinetuningRun", "PretrainingPhase", "PretrainingRun", "finetune", "pretrain"]

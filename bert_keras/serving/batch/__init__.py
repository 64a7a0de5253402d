"""Batch inference over files (`bert-keras predict`): readers, records, writers,
the predictors (a Keras model, a SavedModel export) and the runner."""

from bert_keras.serving.batch.options import PredictOptions
from bert_keras.serving.batch.predictor import BatchPredictor, RowPredictor, load_model
from bert_keras.serving.batch.runner import predict_files
from bert_keras.serving.batch.saved_model import SavedModelPredictor

__all__ = ["BatchPredictor", "PredictOptions", "RowPredictor", "SavedModelPredictor", "load_model", "predict_files"]

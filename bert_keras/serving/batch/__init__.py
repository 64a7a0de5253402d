"""Batch inference over files (`bert-keras predict`): readers, records, writers, runner."""

from bert_keras.serving.batch.runner import BatchPredictor, load_model, predict_files

__all__ = ["BatchPredictor", "load_model", "predict_files"]

"""The tasks tier: `BertTask` (task.py), raw-text helpers (preprocessing.py, windowing.py),
what an export answers (serving_signature.py), one module per head, and distillation.

- `classifier` (`BertClassifier`), `token_classifier` (`BertTokenClassifier`),
  `span_labeler` (`BertSpanLabeler`), `multiple_choice` (`BertMultipleChoice`),
  `feature_extractor` (`BertFeatureExtractor`), `text_embedder` (`BertTextEmbedder`),
  `reranker` (`BertReranker`, a cross-encoder); `checkpoint_models` picks the head a
  checkpoint holds.
- `distillation`: `student_of`, `BertDistiller`, TinyBERT's word replacement.

The benchmarks the heads are scored on (readers, official metrics, their `TaskData`)
are the tier above, `bert_keras.datasets`. Each head declares its text inputs and
per-token outputs once (`text_input_names`, `token_output_names`), read by `fit` and by
its export (`serving_signature`), so the exporter needs no list of model types.
"""

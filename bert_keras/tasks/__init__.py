"""The tasks tier: `BertTask` (task.py), raw-text helpers (preprocessing.py), what an
export answers (serving_signature.py), and one module per head, each beside the
benchmark it is scored on.

- `classifier` (`BertClassifier`) with `glue`: GLUE readers, official metrics, submissions.
- `token_classifier` (`BertTokenClassifier`) with `conll`: CoNLL-2003 reader, conlleval.
- `span_labeler` (`BertSpanLabeler`) with `squad`: windows, n-best decoding, EM/F1.
- `multiple_choice` (`BertMultipleChoice`) and `feature_extractor` (`BertFeatureExtractor`).
- `text_embedder` (`BertTextEmbedder`) with `retrieval`: exact top-k, recall/MRR/nDCG.

Each head declares its text inputs and per-token outputs once (`text_input_names`,
`token_output_names`), read by `fit` and by its export (`serving_signature`), so the
exporter needs no list of model types.
"""

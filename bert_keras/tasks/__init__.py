"""The tasks tier: `BertTask` and one module per head, each beside the benchmark it is
scored on.

- `classifier` (`BertClassifier`) with `glue`: GLUE readers, official metrics, submissions.
- `token_classifier` (`BertTokenClassifier`) with `conll`: CoNLL-2003 reader, conlleval.
- `span_labeler` (`BertSpanLabeler`) with `squad`: windows, n-best decoding, EM/F1.
- `multiple_choice` (`BertMultipleChoice`) and `feature_extractor` (`BertFeatureExtractor`).

Each head also says what its export answers (`serving_signature`), so the exporter
needs no list of model types.
"""

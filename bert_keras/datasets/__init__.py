"""The datasets tier: the benchmarks the heads are fine-tuned and scored on, above the
heads (`bert_keras.tasks`), which never import it.

Each benchmark's module reads its files, scores predictions with its official metric
and implements `TaskData` (task_data.py), the one interface `bert-keras finetune`,
`distill`, the benchmarks in bench/ and a Keras script train and score through:

- `classification` (`ClassificationData`, `tsv_data`: your own TSV) and `glue`
  (`glue_data`: any GLUE task, its metrics and submission files), for `BertClassifier`;
- `conll` (`ConllData`: CoNLL-2003, IOB2, conlleval) for `BertTokenClassifier`;
- `squad` (`SquadData`: windows, batches) and `squad_scoring` (n-best decoding, EM/F1)
  for `BertSpanLabeler`;
- `retrieval` (`PairData`: pair files; exact top-k, recall/MRR/nDCG, STS correlations)
  for `BertTextEmbedder`;
- `reranking` (`RerankingData`: hard-negative mining, ranking metrics) for `BertReranker`.

`metrics` (accuracy, F1, MCC, Pearson, Spearman) and `tsv` (the TSV readers) are shared
by them.
"""

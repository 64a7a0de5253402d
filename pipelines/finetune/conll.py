"""`bert-keras finetune conll`: CoNLL-2003 NER with a `BertTokenClassifier`.

Reading, IOB1 -> IOB2 and conlleval are `bert_keras.datasets.conll`; this command trains,
scores each epoch and writes the best epoch's `predictions.txt` (conlleval's input).

Example: `bert-keras finetune conll --data-dir ../shared/data/conll2003 --output-dir runs/ner`.
"""

from bert_keras_cli.arguments import InputPath, add_window_arguments, report_truncation

HELP = "CoNLL-2003 named entity recognition"
DEFAULTS = dict(learning_rate=5e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    parser.add_argument(
        "--data-dir", required=True, type=InputPath, help="folder with eng.train and eng.testa (eng.testb)"
    )
    parser.add_argument("--eval-split", default="testa", help="eng.<split> to evaluate on (default testa)")
    add_window_arguments(parser, pooling=False, trained=True)
    parser.add_argument(
        "--document-context",
        action="store_true",
        help="pack each sentence with the words around it in its document (up to --max-seq-length pieces), "
        "as the paper's CoNLL-2003 results; only the sentence's own words are labelled and scored",
    )


def run(args):
    from bert_keras.datasets.conll import ConllData
    from bert_keras.tasks.token_classifier import BertTokenClassifier
    from bert_keras_cli.finetune.common import build_head, train, write_best_metrics

    data = ConllData(args.data_dir, args.eval_split, args.max_examples, args.document_context, args.max_seq_length)
    print(f"CoNLL-2003: {data.train_size} training sentences, {data.dev_size} in eng.{args.eval_split}")
    strategy, model = build_head(
        args,
        BertTokenClassifier,
        **data.head_arguments(),
        doc_stride=args.doc_stride,
        window_micro_batch=args.window_micro_batch,
    )
    data.prepare(model)
    if args.document_context:
        print(f"document context: {sum(len(c.words) for c in data.train_contexts)} words in training examples")
    report_truncation(args, model.preprocessor, data.training_texts(), "training sentences")
    best = train(args, strategy, model, data)
    write_best_metrics(args, best)
    return 0

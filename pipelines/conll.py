"""`bert-keras finetune conll`: CoNLL-2003 NER with a `BertTokenClassifier`.

Reading, IOB1 -> IOB2 and conlleval are `bert_keras.tasks.conll`; this command trains,
scores each epoch and writes the best epoch's `predictions.txt` (conlleval's input).

Example: `bert-keras finetune conll --data-dir ../shared/data/conll2003 --output-dir runs/ner`.
"""

import json
from pathlib import Path

from pipelines.arguments import InputPath, add_window_arguments, report_truncation

HELP = "CoNLL-2003 named entity recognition"
DEFAULTS = dict(learning_rate=5e-5, epochs=3, batch_size=32, max_seq_length=128)


def add_arguments(parser):
    parser.add_argument(
        "--data-dir", required=True, type=InputPath, help="folder with eng.train and eng.testa (eng.testb)"
    )
    parser.add_argument("--eval-split", default="testa", help="eng.<split> to evaluate on (default testa)")
    add_window_arguments(parser, pooling=False)
    parser.add_argument(
        "--document-context",
        action="store_true",
        help="pack each sentence with the words around it in its document (up to --max-seq-length pieces), "
        "as the paper's CoNLL-2003 results; only the sentence's own words are labelled and scored",
    )


def run(args):
    from bert_keras.tasks.conll import (
        LABELS,
        conll_scores,
        document_context,
        read_conll,
        tagging_batches,
        training_examples,
        write_predictions,
    )
    from bert_keras.tasks.token_classifier import BertTokenClassifier
    from pipelines.finetune import build_head, train

    data_dir = Path(args.data_dir)
    train_sentences = read_conll(data_dir / "eng.train")[: args.max_examples]
    eval_sentences = read_conll(data_dir / f"eng.{args.eval_split}")[: args.max_examples]
    print(f"CoNLL-2003: {len(train_sentences)} training sentences, {len(eval_sentences)} in eng.{args.eval_split}")
    strategy, model = build_head(
        args, BertTokenClassifier, num_classes=len(LABELS), labels=LABELS, doc_stride=args.doc_stride
    )
    output_dir = Path(args.output_dir)
    tagged = {}  # the last evaluation's predicted tags
    train_contexts = eval_contexts = None
    if args.document_context:
        tokenizer = model.preprocessor.tokenizer
        train_contexts = document_context(train_sentences, tokenizer, args.max_seq_length)
        eval_contexts = document_context(eval_sentences, tokenizer, args.max_seq_length)
        print(f"document context: {sum(len(c.words) for c in train_contexts)} words in training examples")

    def evaluate(model):
        """conlleval scores."""
        metrics, tagged["tags"] = conll_scores(model, eval_sentences, args.eval_batch_size, eval_contexts)
        return metrics

    def write_best(metrics):
        """The best epoch's tags, as `word gold predicted` lines."""
        write_predictions(output_dir / "predictions.txt", eval_sentences, tagged["tags"])

    word_lists, _ = training_examples(train_sentences, train_contexts)
    report_truncation(args, model.preprocessor, [" ".join(words) for words in word_lists], "training sentences")
    batches = tagging_batches(train_sentences, args.batch_size, args.seed, train_contexts)
    best = train(model, args, batches, len(train_sentences), evaluate, "f1", strategy, on_best=write_best)
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    return 0

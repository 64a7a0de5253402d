"""`bert-keras finetune squad`: SQuAD v1.1 / v2.0 with a `BertSpanLabeler`.

Windowing (`bert_keras.datasets.squad`), n-best decoding and the official EM/F1
(`squad_scoring`) are the library's; this
command reads the files, trains, and writes `predictions.json`, `nbest_predictions.json`
(and `null_odds.json` for v2.0) in the official formats.

Example: `bert-keras finetune squad --train-file train-v1.1.json --predict-file
dev-v1.1.json --output-dir runs/squad`.
"""

import re

from bert_keras_cli.arguments import InputPath

HELP = "SQuAD v1.1/v2.0 extractive question answering"
DEFAULTS = dict(learning_rate=3e-5, epochs=2, batch_size=12, max_seq_length=384)


def add_arguments(parser):
    parser.add_argument("--train-file", required=True, type=InputPath, help="SQuAD json to train on")
    parser.add_argument("--predict-file", required=True, type=InputPath, help="SQuAD json to evaluate on")
    parser.add_argument("--train-articles", help="slice of the train file's articles, e.g. 0:36")
    parser.add_argument("--predict-articles", help="slice of the predict file's articles, e.g. 36:48")
    parser.add_argument("--version-2-with-negative", action="store_true", help="SQuAD v2.0 (unanswerable questions)")
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--max-query-length", type=int, default=64)
    parser.add_argument("--n-best-size", type=int, default=20)
    parser.add_argument("--max-answer-length", type=int, default=30)
    parser.add_argument("--null-score-diff-threshold", type=float, default=0.0)


def parse_slice(text):
    if text is None:
        return None
    match = re.fullmatch(r"(\d*):(\d*)", text)
    if not match:
        raise ValueError(f"article slice must look like 0:36, got {text!r}")
    return slice(*(int(part) if part else None for part in match.groups()))


def run(args):
    from bert_keras.datasets.squad import SquadData
    from bert_keras.tasks.span_labeler import BertSpanLabeler
    from bert_keras_cli.finetune.common import build_head, train, write_best_metrics

    data = SquadData(
        args.train_file,
        args.predict_file,
        parse_slice(args.train_articles),
        parse_slice(args.predict_articles),
        args.max_examples,
        args.version_2_with_negative,
        max_seq_length=args.max_seq_length,
        doc_stride=args.doc_stride,
        max_query_length=args.max_query_length,
        n_best_size=args.n_best_size,
        max_answer_length=args.max_answer_length,
        null_score_diff_threshold=args.null_score_diff_threshold,
    )
    strategy, model = build_head(args, BertSpanLabeler)
    data.prepare(model)
    print(
        f"SQuAD {'v2.0' if data.version_2 else 'v1.1'}: {len(data.train)} training questions "
        f"({data.train_size} windows), {data.dev_size} to evaluate ({len(data.dev_features)} windows)"
    )
    best = train(args, strategy, model, data)
    write_best_metrics(args, best)
    return 0

"""`bert-keras finetune squad`: SQuAD v1.1 / v2.0 with a `BertSpanLabeler`.

Windowing, n-best decoding and the official EM/F1 are `bert_keras.tasks.squad`; this
command reads the files, trains, and writes `predictions.json`, `nbest_predictions.json`
(and `null_odds.json` for v2.0) in the official formats.

Example: `bert-keras finetune squad --train-file train-v1.1.json --predict-file
dev-v1.1.json --output-dir runs/squad`.
"""

import json
import re
from pathlib import Path

from pipelines.arguments import InputPath

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
    from bert_keras.tasks.span_labeler import BertSpanLabeler
    from bert_keras.tasks.squad import decode, evaluate, feature_batches, make_features, predict_logits, read_squad
    from pipelines.finetune import build_head, train

    version_2 = args.version_2_with_negative
    train_examples = read_squad(args.train_file, parse_slice(args.train_articles))[: args.max_examples]
    eval_examples = read_squad(args.predict_file, parse_slice(args.predict_articles))[: args.max_examples]
    strategy, model = build_head(args, BertSpanLabeler)
    tokenizer = model.preprocessor.tokenizer
    options = dict(
        max_seq_length=args.max_seq_length, doc_stride=args.doc_stride, max_query_length=args.max_query_length
    )
    train_features = make_features(train_examples, tokenizer, **options)
    eval_features = make_features(eval_examples, tokenizer, **options)
    print(
        f"SQuAD {'v2.0' if version_2 else 'v1.1'}: {len(train_examples)} training questions "
        f"({len(train_features)} windows), {len(eval_examples)} to evaluate ({len(eval_features)} windows)"
    )
    output_dir = Path(args.output_dir)
    decoded = {}  # the last evaluation's predictions, n-best lists and null odds

    def evaluate_model(model):
        """Official EM/F1 of the decoded answers."""
        start_logits, end_logits = predict_logits(model, eval_features, args.eval_batch_size)
        predictions, nbest, null_odds = decode(
            eval_examples,
            eval_features,
            start_logits,
            end_logits,
            args.n_best_size,
            args.max_answer_length,
            version_2,
            args.null_score_diff_threshold,
        )
        decoded.update(predictions=predictions, nbest=nbest, null_odds=null_odds)
        return evaluate(eval_examples, predictions, version_2)

    batches = feature_batches(train_features, args.batch_size, shuffle=True, seed=args.seed)
    best = train(
        model,
        args,
        batches,
        len(train_features),
        evaluate_model,
        "f1",
        strategy,
        preprocessed=True,
        on_best=lambda metrics: write_predictions(output_dir, decoded, version_2),
    )
    (output_dir / "best_metrics.json").write_text(json.dumps(best, indent=2) + "\n")
    return 0


def write_predictions(output_dir, decoded, version_2):
    """The best epoch's predictions (`decoded`), in the official formats."""
    text = json.dumps(decoded["predictions"], indent=2, ensure_ascii=False)
    (output_dir / "predictions.json").write_text(text + "\n")
    (output_dir / "nbest_predictions.json").write_text(
        json.dumps(decoded["nbest"], indent=2, ensure_ascii=False) + "\n"
    )
    if version_2:
        (output_dir / "null_odds.json").write_text(json.dumps(decoded["null_odds"], indent=2) + "\n")

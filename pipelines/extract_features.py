"""`bert-keras extract-features`: contextual token features as JSON lines, in the format
of the original extract_features.py.

Input: one example per line, `text` or `text_a ||| text_b`. Output: one JSON object per
line, `{"linex_index": i, "features": [{"token": "[CLS]", "layers": [{"index": -1,
"values": [...]}, ...]}, ...]}` over the packed tokens ([CLS], pieces, [SEP]), values
rounded to 6 decimals as the original. With `--pooling cls|mean` each line also gets
`"sentence_layers"`: the pooled vector per layer, same layout.
"""

import json

from bert_keras_cli.arguments import InputPath, accept_layer_lists, add_checkpoint_arguments, checkpoint_source


def register(subparsers):
    parser = subparsers.add_parser(
        "extract-features",
        help="write per-token features of chosen layers as JSON lines",
        description=__doc__,
    )
    parser.add_argument(
        "--input", required=True, type=InputPath, help="text file, one example per line ('a ||| b' for pairs)"
    )
    parser.add_argument("--output", required=True, help="JSON lines file to write")
    add_checkpoint_arguments(parser)
    parser.add_argument("--layers", default="-1,-2,-3,-4", help="comma-separated layer indexes, -1 the last")
    accept_layer_lists(parser)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--pooling", choices=("cls", "mean"), help="also write a sentence vector per layer")
    parser.set_defaults(func=run)


def read_examples(path):
    """[(text_a, text_b or None)] from a file of lines `text` or `text_a ||| text_b`."""
    from bert_keras.files import read_text

    examples = []
    for number, line in enumerate(read_text(path, "input").splitlines(), start=1):
        parts = line.strip().split(" ||| ")
        if len(parts) > 2:
            raise ValueError(f"{path}:{number}: more than one ' ||| ' separator")
        examples.append((parts[0], parts[1] if len(parts) == 2 else None))
    return examples


def parse_layers(text):
    try:
        return [int(value) for value in text.split(",")]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated integers, got {text!r}") from None


def run(args):
    import tensorflow as tf

    from bert_keras.tasks.feature_extractor import BertFeatureExtractor

    layers = parse_layers(args.layers)
    examples = read_examples(args.input)
    source = checkpoint_source(args.init)
    extractor = BertFeatureExtractor.from_checkpoint(
        source,
        vocab=args.vocab,
        lower_case=False if args.cased else None,
        seq_length=None,
        max_seq_length=args.max_seq_length,
        layers=layers,
        combine="stack",
        pooling=args.pooling or "cls",
    )
    config, preprocessor = extractor.encoder.config, extractor.preprocessor
    print(f"encoder {source}: L{config.num_hidden_layers}/H{config.hidden_size}")
    features = tf.function(lambda inputs: extractor(inputs, training=False), reduce_retracing=True)
    tokenizer = preprocessor.tokenizer

    with open(args.output, "w", encoding="utf-8") as out:
        for start in range(0, len(examples), args.batch_size):
            batch = examples[start : start + args.batch_size]
            # Pairs and single texts are packed separately (a batch has one segment count).
            for pair in (False, True):
                rows = [(start + i, ex) for i, ex in enumerate(batch) if (ex[1] is not None) == pair]
                if not rows:
                    continue
                segments = [tf.constant([ex[0] for _, ex in rows])]
                if pair:
                    segments.append(tf.constant([ex[1] for _, ex in rows]))
                inputs = preprocessor(tuple(segments))
                outputs = features(inputs)
                ids = inputs["input_word_ids"].numpy()
                lengths = inputs["input_mask"].numpy().sum(axis=1)
                values = outputs["token_features"].numpy()
                pooled = outputs["sentence_features"].numpy()
                for row, (index, _) in enumerate(rows):
                    line = {
                        "linex_index": index,
                        "features": [
                            {
                                "token": tokenizer.id_to_token(int(ids[row, position])),
                                "layers": _layer_values(layers, values[row, position]),
                            }
                            for position in range(lengths[row])
                        ],
                    }
                    if args.pooling:
                        line["sentence_layers"] = _layer_values(layers, pooled[row])
                    out.write(json.dumps(line) + "\n")
    print(f"wrote features of {len(examples)} inputs ({len(layers)} layers) to {args.output}")
    return 0


def _layer_values(layers, values):
    return [{"index": layer, "values": [round(float(x), 6) for x in values[i]]} for i, layer in enumerate(layers)]

"""`bert-keras export`: a trained model -> `BASE/<version>/` SavedModel for TF Serving, or
(`--format litert|onnx`) one `.tflite` / `.onnx` file.

Loads a `.keras` file (any head, encoder or pre-training model) or an encoder checkpoint
(TF1 / Hugging Face), writes the export with tokenization inside, then checks it the
way TF Serving would run it: the op gate for the target release, and a load with the
TF1 session loader that replays the warm-up requests. LiteRT and ONNX exports are loaded
in ai-edge-litert's interpreter / ONNX Runtime and compared with the Keras model.
"""

from bert_keras_cli.arguments import CheckpointPath, InputPath, add_window_arguments


def register(subparsers):
    parser = subparsers.add_parser(
        "export", help="write a SavedModel for TensorFlow Serving (raw text in)", description=__doc__
    )
    parser.add_argument(
        "model",
        type=CheckpointPath,
        help=".keras file, Hugging Face folder or Hub name (ORG/NAME[@REVISION]), TF1 checkpoint",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="model base directory, the export goes to OUT/VERSION; with --format litert|onnx the file to write",
    )
    add_format_arguments(parser)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument(
        "--pretrainer", action="store_true", help="load a checkpoint's MLM/NSP heads too and serve fill-mask"
    )
    parser.add_argument(
        "--segments",
        nargs="+",
        help="string input names (default: those the model was fine-tuned on, e.g. text, or "
        "text_a text_b for sentence pairs; question context for span models; question "
        "choices for multiple choice); a different count than it was trained on is warned about",
    )
    parser.add_argument(
        "--labels", nargs="+", help="class or tag names, in label-id order (default: those it was fine-tuned with)"
    )
    parser.add_argument(
        "--vocab", type=InputPath, help="vocab.txt when the model holds no preprocessor (checked against the model's)"
    )
    parser.add_argument("--cased", action="store_true", help="with --vocab: a cased vocabulary")
    parser.add_argument(
        "--max-seq-length",
        type=int,
        help="longest packed sequence (default: the length the model was fine-tuned at, else 512); "
        "requests are padded only to their longest text",
    )
    add_window_arguments(parser, default_pooling=None, served=True)
    parser.add_argument(
        "--serving-release", default="2.12", help="oldest TF Serving release that must be able to run the export"
    )
    parser.add_argument("--model-name", default="bert", help="model name in the warm-up requests")
    parser.add_argument(
        "--compute-dtype",
        choices=["float32", "bfloat16"],
        help="default: the model's own. bfloat16: weights and matmuls in bfloat16, ~1.7x "
        "faster on CPUs with AVX512-BF16/AMX; outputs stay float32, within ~1e-2 of float32",
    )
    parser.add_argument(
        "--hub-style",
        action="store_true",
        help="instead: the TF Hub pair OUT/preprocess + OUT/encoder, reusable SavedModels that "
        "hub.KerasLayer fine-tunes (with --pretrainer the encoder gets the mlm sub-object)",
    )
    parser.add_argument(
        "--seq-length", type=int, default=128, help="with --hub-style: the preprocess model's default packed length"
    )
    parser.set_defaults(func=run)


def add_format_arguments(parser):
    parser.add_argument(
        "--format",
        choices=["savedmodel", "litert", "onnx"],
        default="savedmodel",
        help="litert: a .tflite for ai-edge-litert (raw text in for single-text heads, else packed ids); "
        "onnx: a .onnx for ONNX Runtime (packed ids in); both need pip install 'bert-keras[deploy]'",
    )
    parser.add_argument(
        "--quantize",
        choices=["int8", "float16", "bfloat16"],
        help="int8 (litert, onnx): int8 weights and matmuls; float16 (litert): float16 weights; "
        "bfloat16 (savedmodel): as --compute-dtype bfloat16",
    )
    parser.add_argument(
        "--mediapipe",
        action="store_true",
        help="with --format litert: packed ids in, with the metadata (vocabulary, tokenizer, labels) MediaPipe "
        "Tasks' TextClassifier / TextEmbedder read; needs pip install mediapipe to check it",
    )


def load_model(path, pretrainer=False):
    """The model to serve (`checkpoint_models.load_model`, as every command loads one): a
    `.keras` file as saved, a task folder's head (a Hugging Face BertFor* folder, a
    run_classifier/run_squad checkpoint) with its labels, or an encoder; the pre-training
    heads of a checkpoint only with `pretrainer`."""
    import bert_keras  # noqa: F401  (registers every serialisable class)
    from bert_keras.checkpoint.reader import is_keras_file
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.tasks.checkpoint_models import load_model as load_any

    model = load_any(path, cls=BertPretrainer if pretrainer else None)  # a .keras file comes back as saved
    if isinstance(model, BertPretrainer) and not pretrainer and not is_keras_file(path):
        return model.encoder
    return model


def run(args):
    from bert_keras.serving.export import serving_preprocessor
    from bert_keras.tasks.task import with_windows

    if args.mediapipe and args.format != "litert":
        raise ValueError("--mediapipe is an option of --format litert")
    model = load_model(args.model, args.pretrainer)
    if args.doc_stride is not None or args.window_pooling is not None:
        if args.format != "savedmodel":
            raise ValueError("--doc-stride and --window-pooling are for SavedModel exports (windows made in the graph)")
        model = with_windows(model, doc_stride=args.doc_stride, window_pooling=args.window_pooling)
    preprocessor = serving_preprocessor(model, args.model, args.vocab, args.cased, args.max_seq_length)
    if args.format != "savedmodel":
        return run_portable(args, model, preprocessor)
    if args.quantize not in (None, "bfloat16"):
        raise ValueError(
            f"--quantize {args.quantize} is for --format litert|onnx; a SavedModel takes --quantize bfloat16 "
            "(Keras' int8 quantization covers only Dense/EinsumDense layers, not the encoder's fused matmuls)"
        )
    args.compute_dtype = args.quantize or args.compute_dtype
    return run_savedmodel(args, model, preprocessor)


def run_savedmodel(args, model, preprocessor):
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.serving import export
    from bert_keras.serving.ops import check_serving_ops
    from bert_keras.serving.tfserving import c_api_loader
    from bert_keras.serving.tfserving.session import SessionPredictor

    if args.hub_style:
        from bert_keras import BertPreprocessor
        from bert_keras.serving.hub_export import export_hub_style

        fixed = BertPreprocessor(preprocessor.tokenizer, seq_length=args.seq_length)
        paths = export_hub_style(model, fixed, args.out)
        loaders = "the TF1 session loader and TF Serving's C++ loader"
        for path in paths:
            check_serving_ops(path, args.serving_release)
            SessionPredictor(path, replay_warmup=False).close()
            try:
                c_api_loader.CApiPredictor(path, args.serving_release).close()
            except c_api_loader.Unavailable as unavailable:
                loaders = f"the TF1 session loader (C++ loader check skipped: {unavailable.reason})"
        mlm = " and .mlm" if isinstance(model, BertPretrainer) else ""
        print(
            f"exported the TF Hub-style pair: {paths[0]} (tokenize, tokenize_with_offsets, bert_pack_inputs) "
            f"and {paths[1]} (trainable __call__{mlm}; serving_default signature); both load in {loaders} "
            f"and pass the TF Serving {args.serving_release} op gate"
        )
        return 0
    path = export.export_for_serving(
        model,
        preprocessor,
        args.out,
        version=args.version,
        segments=args.segments and tuple(args.segments),
        labels=args.labels,
        model_name=args.model_name,
        compute_dtype=args.compute_dtype,
        max_windows=args.max_windows,
    )
    ops = check_serving_ops(path, args.serving_release)
    predictor = SessionPredictor(path)
    print(f"exported {type(model).__name__} to {path}")
    print(f"  TF Serving >= {args.serving_release} links every op; non-core ops: {ops}")
    print(f"  TF1 session loader: loaded, {len(predictor.warmup_responses)} warm-up requests replayed")
    try:
        count = c_api_loader.check_against_session(path, predictor, args.serving_release)
        print(
            f"  TF Serving's C++ loader (TF_LoadSessionFromSavedModel, only the tf.text ops "
            f"{args.serving_release} links): loaded, {count} warm-up answers equal the session loader's"
        )
    except c_api_loader.Unavailable as unavailable:  # not built here; a loader that ran and disagreed fails
        print(f"  C++ loader check skipped: {unavailable.reason}")
    for name, sides in export.describe_signatures(path).items():
        inputs = ", ".join(f"{k}: {d}{s}" for k, (d, s) in sorted(sides["inputs"].items()))
        outputs = ", ".join(sorted(sides["outputs"]))
        print(f"  signature {name}({inputs}) -> {outputs}")
    predictor.close()
    return 0


def run_portable(args, model, preprocessor):
    from pathlib import Path

    from bert_keras.serving import deploy, portable
    from bert_keras.serving.serving_tasks import trained_inputs

    if args.mediapipe:
        return run_mediapipe(args, model, preprocessor)
    segments, labels = trained_inputs(model, args.segments and tuple(args.segments), args.labels)
    try:
        text, differences = deploy.export_checked(
            args.format, model, preprocessor, args.out, labels, segments, args.quantize
        )
    except portable.MissingRuntime as error:
        raise ValueError(str(error)) from None  # a user's install, not a bug: one line
    path = Path(args.out)
    kind = "float32" if args.quantize is None else args.quantize
    names = ", ".join(f"`{spec.name}`" for spec in deploy.text_specs(segments or ("text",)))
    inputs = f"raw text ({names})" if text else "packed ids (input_word_ids, input_mask, input_type_ids)"
    print(f"exported {type(model).__name__} to {path} ({args.format}, {kind}, {path.stat().st_size / 1e6:.1f} MB)")
    print(f"  inputs: {inputs}; vocabulary: {path.with_suffix('.vocab.txt')}")
    if text:
        print(
            "  tokenized in the file as the original BERT tokenizer on any text; a row whose combining marks NFD "
            "would reorder is refused: `tokenized_exactly` is false and its outputs NaN/-1 (docs/deploy.md)"
        )
    largest = ", ".join(f"{key} {value:.2e}" for key, value in sorted(differences.items()))
    print(f"  loaded in its runtime; largest difference from Keras: {largest}")
    return 0


def run_mediapipe(args, model, preprocessor):
    from pathlib import Path

    from bert_keras.serving import mediapipe_metadata, portable

    try:
        difference, labels = mediapipe_metadata.export_checked(
            model, preprocessor, args.out, args.labels, args.max_seq_length, args.quantize
        )
    except portable.MissingRuntime as error:
        raise ValueError(str(error)) from None
    path = Path(args.out)
    kind = "float32" if args.quantize is None else args.quantize
    print(f"exported {type(model).__name__} to {path} (MediaPipe Tasks, {kind}, {path.stat().st_size / 1e6:.1f} MB)")
    length = mediapipe_metadata.packed_length(preprocessor, args.max_seq_length)
    print(f"  inputs: ids, mask, segment_ids int32 [1, {length}]: every text padded or cut to {length} tokens")
    task = "TextEmbedder" if labels is None else f"TextClassifier, labels {', '.join(labels)}"
    print(f"  ran in MediaPipe's {task}; largest difference from Keras: {difference:.2e}")
    print(
        "  MediaPipe tokenizes in the app: it lowercases ASCII only and keeps accents, so text other than plain "
        "English gets other ids than the original tokenizer unless the app normalises it first (docs/deploy.md)"
    )
    return 0

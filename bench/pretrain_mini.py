"""Quality benchmark: pre-train the mini config (L4/H256/A4) on Gutenberg for a time budget.

Trains on every Gutenberg book but the held-out one (dynamic masking, new masks each
epoch), then reports masked-LM and next-sentence accuracy on instances made from the
held-out book, against always predicting the most frequent token / label.

    python bench/pretrain_mini.py [--minutes 30] [--held-out chesterton-thursday.txt]
"""

import argparse
import collections
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--corpus", default=str(SHARED / "pretraining" / "gutenberg"))
    parser.add_argument("--vocab", default=str(SHARED / "vocab" / "vocab.txt"))
    parser.add_argument("--held-out", default="chesterton-thursday.txt")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-length", type=int, default=128)
    # A 30-minute budget on 2 cores is ~2,500 steps of 32. At 1e-3 this post-LN model stays on the
    # unigram plateau (predicting "the" everywhere) for the whole budget; 5e-4 leaves it within
    # ~200 steps. The linear decay ends a little after the budget does.
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument("--decay-steps", type=int, default=4000)
    parser.add_argument(
        "--no-jit-compile",
        dest="jit_compile",
        action="store_false",
        help="graph mode instead of XLA (XLA is ~10%% faster on CPU)",
    )
    return parser.parse_args(argv)


def held_out_set(book, tokenizer, seq_length):
    """(batches, instances, accuracy of always the most frequent token, rate of random next
    sentences) of the held-out book's instances, made once by the original recipe."""
    import numpy as np
    import tensorflow as tf

    from bert_keras.data.documents import read_documents, tokenize_documents
    from bert_keras.data.instances import InstanceMaker, instance_features
    from bert_keras.data.tfrecords import MODEL_NAMES

    documents = tokenize_documents(read_documents(book), tokenizer)
    maker = InstanceMaker(tokenizer.vocabulary, max_seq_length=seq_length)
    instances = maker.instances(documents, 1, random.Random(0))
    features = [instance_features(i, seq_length, 20) for i in instances]
    held = {
        MODEL_NAMES.get(k, k): np.stack([f[k] for f in features]).astype(
            "float32" if k == "masked_lm_weights" else "int32"
        )
        for k in features[0]
    }
    eval_set = tf.data.Dataset.from_tensor_slices(held).batch(64)
    labels = [t for i in instances for t in i.masked_lm_ids]
    top_token_accuracy = collections.Counter(labels).most_common(1)[0][1] / len(labels)
    nsp_rate = np.mean([i.is_random_next for i in instances])
    return eval_set, instances, top_token_accuracy, nsp_rate


def pretrain(args, train_books, tokenizer):
    """(pretrainer, history, seconds) of the mini model trained for `--minutes`."""
    import keras

    from bert_keras import BertConfig, BertEncoder
    from bert_keras.data.dynamic_masking import dynamic_masking_dataset
    from bert_keras.models.pretrainer import BertPretrainer
    from bert_keras.training.optimization import create_optimizer

    train = dynamic_masking_dataset(train_books, tokenizer, args.batch_size, args.seq_length, seed=0)
    pretrainer = BertPretrainer(BertEncoder(BertConfig.preset("mini")))
    pretrainer.compile(
        optimizer=create_optimizer(args.learning_rate, args.decay_steps, args.warmup_steps),
        jit_compile=args.jit_compile,
    )
    budget = args.minutes * 60

    class TimeBudget(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.time()

        def on_train_batch_end(self, batch, logs=None):
            if time.time() - self.start > budget:
                self.model.stop_training = True

    start = time.time()
    history = pretrainer.fit(
        train, epochs=10**6, steps_per_epoch=100, callbacks=[TimeBudget()], verbose=2, shuffle=False
    )
    return pretrainer, history, time.time() - start


def main(argv=None):
    args = parse_args(argv)

    import keras

    from bert_keras import BertTokenizer

    keras.utils.set_random_seed(0)
    tokenizer = BertTokenizer(args.vocab)
    books = sorted(str(p) for p in Path(args.corpus).glob("*.txt"))
    held_out = [b for b in books if Path(b).name == args.held_out]
    train_books = [b for b in books if b not in held_out]
    if not held_out:
        raise SystemExit(f"{args.held_out} is not in {args.corpus}")

    eval_set, instances, top_token_accuracy, nsp_rate = held_out_set(held_out[0], tokenizer, args.seq_length)
    pretrainer, history, trained = pretrain(args, train_books, tokenizer)
    steps = int(pretrainer.optimizer.iterations.numpy())
    result = pretrainer.evaluate(eval_set, return_dict=True, verbose=0)
    print(
        f"\nmini (L4/H256/A4), {trained / 60:.1f} min, {steps} steps x {args.batch_size} seqs "
        f"({steps * args.batch_size / trained:.1f} seq/s), train loss {history.history['loss'][-1]:.3f}"
    )
    print(
        f"lr {args.learning_rate}, warm-up {args.warmup_steps}, linear decay to 0 at {args.decay_steps}, "
        f"seq {args.seq_length}, jit_compile={args.jit_compile}"
    )
    print(f"held-out {args.held_out}: {len(instances)} instances")
    print(
        f"  masked-LM accuracy      {result['masked_lm_accuracy']:.3f}  (most frequent token: {top_token_accuracy:.3f})"
    )
    print(
        f"  next-sentence accuracy  {result['next_sentence_accuracy']:.3f}  "
        f"(majority label: {max(nsp_rate, 1 - nsp_rate):.3f})"
    )
    print(f"  masked-LM loss {result['masked_lm_loss']:.3f}, next-sentence loss {result['next_sentence_loss']:.3f}")


if __name__ == "__main__":
    sys.exit(main())

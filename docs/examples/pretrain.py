"""Pre-training a small BERT on your text (masked LM + next sentence): the run that
`bert-keras pretrain` makes, as a Keras script.

    python docs/examples/pretrain.py VOCAB_TXT CORPUS_TXT OUTPUT_DIR [STEPS]

does what `bert-keras pretrain --config tiny --vocab VOCAB_TXT --corpus CORPUS_TXT
--output OUTPUT_DIR --steps STEPS --checkpoint-every STEPS/4 --warmup-steps STEPS/10
--learning-rate 1e-3` does, to the same weights: new masks every epoch, a checkpoint
every quarter (OUTPUT_DIR/checkpoints/phase1), TensorBoard logs (OUTPUT_DIR/logs) and
the encoder in three formats (OUTPUT_DIR/final). Killed and run again, it resumes.
"""

import sys

import keras

from bert_keras import BertConfig, BertEncoder, BertPretrainer, BertTokenizer
from bert_keras.recipes import PretrainingPhase, pretrain

vocab, corpus, output_dir = sys.argv[1:4]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 1000

keras.utils.set_random_seed(0)  # the model's initial weights; the data has its own seed (pretrain's `seed`)
config = BertConfig.preset("tiny", vocab_size=BertTokenizer(vocab).vocabulary_size)
pretrainer = BertPretrainer(BertEncoder(config))

# One phase of `steps` batches of 32 x 128 tokens; the paper adds a second phase at 512 tokens.
phase = PretrainingPhase(steps, batch_size=32, seq_length=128, learning_rate=1e-3, warmup_steps=max(1, steps // 10))
run = pretrain(
    pretrainer,
    [phase],
    vocab=vocab,
    corpus=[corpus],
    output_dir=output_dir,
    checkpoint_every=max(1, steps // 4),
)
accuracy = run.history["phase1"].history.get("masked_lm_accuracy", [])  # none when the run had already finished
print("masked LM accuracy by checkpoint interval:", ", ".join(f"{value:.3f}" for value in accuracy))

"""Fine-tuning a classifier on your own TSV files (columns `text` and `label`): the run
that `bert-keras finetune tsv` makes, as a Keras script.

    python docs/examples/finetune.py CHECKPOINT TRAIN_TSV DEV_TSV OUTPUT_DIR [STEPS]

does what `bert-keras finetune tsv --init CHECKPOINT --train TRAIN_TSV --dev DEV_TSV
--output-dir OUTPUT_DIR --max-train-steps STEPS` does, to the same weights: AdamW with
10% warm-up then linear decay, batches of similar lengths, the dev accuracy after every
epoch, the best epoch's model as OUTPUT_DIR/best.keras. CHECKPOINT is any encoder
checkpoint with its vocab.txt beside it (TF1, Hugging Face or .keras).
"""

import csv
import sys

import keras
import numpy as np

from bert_keras import BertClassifier, BertEncoder
from bert_keras.recipes import finetune
from bert_keras.tasks.preprocessing import preprocessor_for
from bert_keras.training.finetuning import length_grouped_batches

checkpoint, train_tsv, dev_tsv, output_dir = sys.argv[1:5]
steps = int(sys.argv[5]) if len(sys.argv) > 5 else None


def read_tsv(path):
    with open(path, encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE))
    return np.array([row["text"] for row in rows], dtype=object), [row["label"] for row in rows]


train_texts, train_labels = read_tsv(train_tsv)
dev_texts, dev_labels = read_tsv(dev_tsv)
labels = sorted(set(train_labels))

keras.utils.set_random_seed(0)  # the new head's weights, dropout and the batch order
encoder = BertEncoder.from_checkpoint(checkpoint)
preprocessor = preprocessor_for(encoder, seq_length=None, max_seq_length=128)  # pads each batch to its longest
model = BertClassifier(encoder, len(labels), preprocessor=preprocessor, labels=labels)

targets = np.array([labels.index(label) for label in train_labels], "int32")
lengths = [len(text) for text in train_texts]


def batches():  # built anew for each fit: a run resumed inside an epoch sees the same data order
    return length_grouped_batches((train_texts, targets), lengths, batch_size=32, shuffle=True, seed=0)


def evaluate(model):
    predicted = np.argmax(model.predict(dev_texts, batch_size=64, verbose=0), axis=-1)
    return {"accuracy": float(np.mean(predicted == [labels.index(label) for label in dev_labels]))}


run = finetune(model, batches, len(train_texts), evaluate, "accuracy", output_dir=output_dir, max_train_steps=steps)
print(f"best dev accuracy {run.best['accuracy']:.3f} (epoch {run.best['epoch']}), model in {output_dir}/best.keras")

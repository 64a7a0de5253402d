"""Task-specific distillation: a smaller student of a fine-tuned task model, trained
through `model.fit` to match the teacher's outputs.

`student_of(teacher, spec)` makes the student, a head of the teacher's own class with its
preprocessor (vocabulary), labels and segments, so it exports and serves as the teacher
does: `teacher:K` keeps K of the teacher's layers, evenly spaced, with its embeddings,
pooler and head (DistilBERT's initialisation); a preset name (`tiny`, `mini`, ...) starts
from random weights; any other spec is a checkpoint `BertEncoder.from_checkpoint` reads.

`BertDistiller(teacher, student)` is a task whose `fit` trains the student alone: the
loss mixes soft targets (the teacher's logits at a temperature; its vectors or scores
for embedders and regression) with the hard labels, and optionally matches hidden states
(through a learned projection when widths differ) and attention maps of mapped layers.
The teacher runs on the fly, or its outputs come cached in `y` (`teacher_outputs`).

`augmented_texts(teacher, columns, copies)` makes more training text, as TinyBERT does,
by replacing words with near ones; `teacher_labelled` adds it (and unlabelled text) to a
training set with the teacher's labels.
"""

import contextlib
import dataclasses

import keras
import numpy as np
import tensorflow as tf

from bert_keras.models.encoder import BertEncoder
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.preprocessing import is_packed, text_columns
from bert_keras.tasks.task import BertTask, default_optimizer
from bert_keras.tasks.text_embedder import BertTextEmbedder
from bert_keras.tasks.token_classifier import IGNORE_LABEL, BertTokenClassifier
from bert_keras.training.distillation import FeatureMatchingLoss, SoftTargetLoss, global_mean_weights

TEACHER_PREFIX = "teacher:"
# The key of cached teacher outputs when `y` is a dict (the labels go under "labels").
TEACHER_OUTPUTS = "teacher_outputs"


def evenly_spaced_layers(teacher_layers, student_layers):
    """The teacher layers that `student_layers` layers stand for, first and last kept
    (6 -> 3: 0, 3, 5; 12 -> 6: 0, 2, 4, 7, 9, 11, DistilBERT's choice)."""
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"a student of {student_layers} layers from a teacher of {teacher_layers}: need 1..teacher's")
    if student_layers == 1:
        return [teacher_layers - 1]
    return [int(np.floor(i * (teacher_layers - 1) / (student_layers - 1) + 0.5)) for i in range(student_layers)]


def student_encoder(teacher, spec):
    """The student's `BertEncoder` for `spec` (see the module docstring), with the
    teacher's vocabulary size and positions."""
    config = teacher.encoder.config
    if spec.startswith(TEACHER_PREFIX):
        count = spec[len(TEACHER_PREFIX) :]
        if not count.isdigit():
            raise ValueError(f"student {spec!r}: expected teacher:K with K a number of layers")
        layers = evenly_spaced_layers(config.num_hidden_layers, int(count))
        encoder = BertEncoder(dataclasses.replace(config, num_hidden_layers=len(layers)))
        encoder.embeddings.set_weights(teacher.encoder.embeddings.get_weights())
        for block, index in zip(encoder.transformer_blocks, layers):
            block.set_weights(teacher.encoder.transformer_blocks[index].get_weights())
        encoder.pooler.set_weights(teacher.encoder.pooler.get_weights())
        return encoder
    from bert_keras.config import PRESETS, BertConfig

    if spec in PRESETS:  # the preset's sizes; dropout, activation, vocabulary and positions the teacher's
        preset = BertConfig.preset(spec)
        sizes = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
        return BertEncoder(dataclasses.replace(config, **{name: getattr(preset, name) for name in sizes}))
    encoder = BertEncoder.from_checkpoint(spec)
    if encoder.config.vocab_size != config.vocab_size or encoder.config.type_vocab_size != config.type_vocab_size:
        raise ValueError(
            f"student checkpoint {spec}: vocabulary of {encoder.config.vocab_size} pieces and "
            f"{encoder.config.type_vocab_size} segment types; the teacher has {config.vocab_size} and "
            f"{config.type_vocab_size}: a student uses the teacher's vocabulary"
        )
    if encoder.vocab_path and teacher.preprocessor is not None:
        from bert_keras.text.tokenizer import load_vocabulary

        if load_vocabulary(encoder.vocab_path) != list(teacher.preprocessor.tokenizer.vocabulary):
            raise ValueError(
                f"student checkpoint {spec}: its vocab.txt ({encoder.vocab_path}) is not the teacher's vocabulary"
            )
    return encoder


def student_of(teacher, spec):
    """A new head of the teacher's class on `student_encoder(teacher, spec)`, with a copy
    of the teacher's preprocessor and its labels, segments and head settings; `teacher:K`
    students also start from the teacher's head weights."""
    if not isinstance(teacher, BertTask):
        raise TypeError(f"the teacher must be a task model (BertClassifier, ...), got {type(teacher).__name__}")
    config = teacher.get_config()
    config["encoder"] = student_encoder(teacher, spec)
    if config.get("preprocessor") is not None:
        config["preprocessor"] = keras.layers.deserialize(config["preprocessor"])
    config.update(name=f"{teacher.name}_student", trainable=True)
    student = type(teacher)(**config)
    if spec.startswith(TEACHER_PREFIX):
        encoder_weights = {id(weight) for weight in teacher.encoder.weights}
        head = [weight for weight in teacher.weights if id(weight) not in encoder_weights]
        student_encoder_weights = {id(weight) for weight in student.encoder.weights}
        for target, source in zip([w for w in student.weights if id(w) not in student_encoder_weights], head):
            target.assign(source)
    return student


@contextlib.contextmanager
def recording_encoder_outputs(task, attention=False):
    """Within the block, `task`'s calls keep its encoder's whole output dict (hidden state
    of every layer, and attention maps with `attention`) in the yielded dict: heads return
    only their own outputs."""
    record = {}

    def recording_encode(inputs, training):
        if not is_packed(inputs):
            raise ValueError("intermediate-layer losses need packed single-text inputs (one encoder call a batch)")
        outputs = task.encoder(inputs, training=training, return_attention_probs=attention)
        record.update(outputs)
        return outputs

    task._encode = recording_encode
    try:
        yield record
    finally:
        del task._encode


def replacement_words(teacher, words, candidates=15):
    """{word: its `candidates` nearest words} for each of `words` that is one alphabetic
    piece of the teacher's vocabulary (lower-cased when the teacher's tokenizer is):
    the alphabetic whole-word pieces closest by cosine of the teacher's input word
    embeddings. (TinyBERT asks a masked-LM head; a fine-tuned task model has none, and
    its embedding table is the model's own notion of which words are alike.)"""
    tokenizer = teacher.preprocessor.tokenizer
    vocabulary = list(tokenizer.vocabulary)
    index = {piece: i for i, piece in enumerate(vocabulary)}
    pool = np.array([i for i, piece in enumerate(vocabulary) if piece.isalpha()])
    position = {piece_id: i for i, piece_id in enumerate(pool)}
    fold = str.lower if tokenizer.lower_case else str
    known = sorted({fold(word) for word in words if fold(word) in index and fold(word).isalpha()})
    if not known or len(pool) < 2:
        return {}
    table = np.asarray(keras.ops.convert_to_numpy(teacher.encoder.embeddings.word_embeddings), np.float32)
    table /= np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    count = min(candidates, len(pool) - 1)
    nearest = {}
    for start in range(0, len(known), 1024):  # [1024, pool] similarities at a time
        block = known[start : start + 1024]
        similarity = table[[index[word] for word in block]] @ table[pool].T
        similarity[np.arange(len(block)), [position[index[word]] for word in block]] = -np.inf  # not itself
        best = np.argpartition(-similarity, count, axis=1)[:, :count]
        for row, word in enumerate(block):
            nearest[word] = [vocabulary[i] for i in pool[best[row]]]
    return nearest


def augmented_texts(teacher, columns, copies, probability=0.4, candidates=15, seed=0):
    """TinyBERT's data augmentation by word replacement: `copies` variants of every row
    of `columns` (one list of texts per segment), in which each whitespace-separated word
    that `replacement_words` knows is replaced, with `probability`, by one of its
    `candidates` nearest words at random. Returns the variants as columns, row by row
    (`copies` rows for the first input row, then the second's, ...); the teacher labels
    them (soft targets), as it labels `--unlabeled` text."""
    if copies < 1 or not 0.0 < probability <= 1.0:
        raise ValueError(f"augmentation needs copies >= 1 and 0 < probability <= 1, got {copies}, {probability}")
    nearest = replacement_words(teacher, {w for column in columns for text in column for w in text.split()}, candidates)
    fold = str.lower if teacher.preprocessor.tokenizer.lower_case else str
    rng = np.random.default_rng(seed)

    def variant(text):
        words = text.split()
        for i, word in enumerate(words):
            options = nearest.get(fold(word))
            if options and rng.random() < probability:
                words[i] = options[rng.integers(len(options))]
        return " ".join(words)

    return tuple([variant(text) for text in column for _ in range(copies)] for column in columns)


def teacher_labelled(teacher, train, extra_columns=None, augment=0, probability=0.4, seed=0, batch_size=64):
    """`train` (a dataclass of `guids`, `texts`, one list per segment, and `labels`, as
    `datasets.classification.Examples`) plus the texts `extra_columns` (one list per
    segment, e.g. unlabelled text) and `augment` copies of `train` (`augmented_texts`),
    the added examples labelled with the classifier `teacher`'s predicted class. Their
    soft targets are the teacher's logits, as for any example the distiller trains on."""
    if not (isinstance(teacher, BertClassifier) and teacher.num_classes >= 2):
        raise ValueError(
            f"teacher_labelled labels with a classifier's classes; the teacher is a {type(teacher).__name__}"
        )
    if train.labels is None:
        raise ValueError("teacher_labelled adds to a labelled training set; this one has no labels")
    if extra_columns and any(isinstance(column, str) for column in extra_columns):
        raise ValueError("extra_columns: one list of texts per segment, e.g. (texts,), not the texts themselves")
    columns = tuple(list(column) for column in extra_columns) if extra_columns else tuple([] for _ in train.texts)
    if len(columns) != len(train.texts):
        raise ValueError(f"{len(columns)} column(s) of extra text; the training set has {len(train.texts)}")
    if augment:
        copies = augmented_texts(teacher, train.texts, augment, probability, seed=seed)
        columns = tuple(a + b for a, b in zip(columns, copies))
    if not columns[0]:
        return train
    labels = np.argmax(teacher.predict(text_columns(columns), batch_size=batch_size, verbose=0), -1)
    return dataclasses.replace(
        train,
        guids=list(train.guids) + [f"extra-{i}" for i in range(len(columns[0]))],
        texts=tuple(a + b for a, b in zip(train.texts, columns)),
        labels=list(train.labels) + labels.tolist(),
    )


class BertDistiller(BertTask):
    """Trains `student` to reproduce `teacher` (same head class) through `fit`; the
    teacher is frozen and only the student (and the projections) learn. Save
    `distiller.student`: the distiller itself is a training wrapper, not a model to keep.

    Loss = `alpha` * soft + (1 - `alpha`) * hard + `hidden_weight` * hidden +
    `attention_weight` * attention:
    - soft: `SoftTargetLoss` at `temperature` on logits (per labelled token for
      taggers), or `FeatureMatchingLoss` on regression scores and embedder vectors;
    - hard: the student head's own default loss on the labels (none when `y` is None);
    - hidden: MSE of each student layer (projected to the teacher's width when narrower)
      to its teacher layer (`evenly_spaced_layers`); attention: MSE of attention maps,
      for students with the teacher's number of heads.
    `alpha=0` and no intermediate loss is the labels-only baseline (no teacher forward).

    Raw text goes through the student's preprocessor (the teacher's copy) as in any task.
    Cached teacher outputs: `y = {"labels": ..., "teacher_outputs": ...}`.
    """

    def __init__(self, teacher, student, temperature=2.0, alpha=0.5, hidden_weight=0.0, attention_weight=0.0, **kwargs):
        if type(student) is not type(teacher):
            raise TypeError(f"the student is a {type(student).__name__}, the teacher a {type(teacher).__name__}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be within [0, 1], got {alpha}")
        teacher_config, student_config = teacher.encoder.config, student.encoder.config
        if teacher_config.vocab_size != student_config.vocab_size:
            raise ValueError(
                f"the student's vocabulary has {student_config.vocab_size} pieces, the teacher's "
                f"{teacher_config.vocab_size}: distillation needs the teacher's vocabulary"
            )
        if attention_weight and teacher_config.num_attention_heads != student_config.num_attention_heads:
            raise ValueError(
                f"attention_weight needs the teacher's {teacher_config.num_attention_heads} attention heads; "
                f"the student has {student_config.num_attention_heads}"
            )
        super().__init__(
            student.encoder,
            student.preprocessor,
            segments=student.segments or teacher.segments,
            labels=student.labels,
            **kwargs,
        )
        student.segments = self.segments
        teacher.trainable = False
        self.teacher = teacher
        self.student = student
        self.temperature = float(temperature)
        self.alpha = float(alpha)
        self.hidden_weight = float(hidden_weight)
        self.attention_weight = float(attention_weight)
        self.layer_map = evenly_spaced_layers(teacher_config.num_hidden_layers, student_config.num_hidden_layers)
        self.projections = []
        if hidden_weight and student_config.hidden_size != teacher_config.hidden_size:
            for index in range(len(self.layer_map)):
                projection = keras.layers.Dense(teacher_config.hidden_size, name=f"hidden_projection_{index}")
                projection.build((None, None, student_config.hidden_size))
                self.projections.append(projection)
        regression = getattr(student, "num_classes", None) == 1
        self.matches_vectors = isinstance(student, BertTextEmbedder) or regression
        self.per_token = isinstance(student, BertTokenClassifier)
        if self.matches_vectors:
            self.soft_loss = FeatureMatchingLoss()
        elif self.per_token:  # weighted by `global_mean_weights`, summed
            self.soft_loss = SoftTargetLoss(self.temperature, reduction="sum")
        else:
            self.soft_loss = SoftTargetLoss(self.temperature)
        self.feature_loss = FeatureMatchingLoss(reduction="sum")
        self.hard_loss = None
        self.built = True

    @property
    def intermediate(self):
        return bool(self.hidden_weight or self.attention_weight)

    @property
    def needs_teacher(self):
        return bool(self.alpha or self.intermediate)

    # --- raw text: the student's -----------------------------------------------------

    def text_segments(self, x, record=False):
        self.segments = self.student.text_segments(x, record)
        return self.segments

    def preprocess_samples(self, x, y=None, sample_weight=None):
        return self.student.preprocess_samples(x, y, sample_weight)

    def serving_signature(self, preprocessor, labels=None):
        return self.student.serving_signature(preprocessor, labels)

    # --- training --------------------------------------------------------------------

    def compile(self, optimizer="auto", loss="auto", **kwargs):
        """`optimizer` "auto": the student's default; `loss`, the loss on the hard labels,
        "auto": the student head's default (cross-entropy, MSE, in-batch negatives).
        Metrics are left to the caller's evaluation (the teacher's outputs are not a
        metric's labels)."""
        if loss == "auto":
            self.student.compile()
            loss = self.student.loss
        self.hard_loss = loss
        if optimizer == "auto":
            optimizer = default_optimizer()
        super().compile(optimizer=optimizer, **kwargs)

    def call(self, inputs, training=None):
        if not (training and self.intermediate):
            return self.student(inputs, training=training)
        with recording_encoder_outputs(self.student, attention=bool(self.attention_weight)) as record:
            outputs = self.student(inputs, training=training)
        self._student_features = record
        return outputs

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        labels, teacher_outputs, teacher_features = self._teacher_targets(x, y)
        weight = sample_weight
        if self.per_token:
            weight = tf.cast(x["input_mask"], tf.float32)
            if labels is not None:
                weight *= tf.cast(tf.not_equal(labels, IGNORE_LABEL), tf.float32)
            weight = global_mean_weights(weight)
        losses = []
        if self.alpha:
            losses.append(self.alpha * self.soft_loss(tf.stop_gradient(teacher_outputs), y_pred, weight))
        if self.alpha < 1 and labels is not None:
            if self.hard_loss is None:
                raise ValueError("compile the distiller first")
            losses.append((1 - self.alpha) * self.hard_loss(labels, y_pred, sample_weight))
        if training and self.intermediate:
            losses += self._intermediate_losses(x, teacher_features)
        losses += [tf.reduce_sum(tf.cast(loss, tf.float32)) for loss in self.losses]  # regularization
        if not losses:
            raise ValueError("no loss: alpha=1 needs the teacher (or its cached outputs), alpha<1 needs labels")
        return tf.add_n(losses)

    def _teacher_targets(self, x, y):
        """(labels, teacher outputs, teacher features): the outputs cached in `y`, or the
        teacher run on `x` (with its hidden states and attention maps when matched)."""
        if isinstance(y, dict) and TEACHER_OUTPUTS in y:
            if self.intermediate:
                raise ValueError("cached teacher outputs hold no hidden states: run the teacher on the fly")
            return y.get("labels"), y[TEACHER_OUTPUTS], None
        if not self.needs_teacher:
            return y, None, None
        with recording_encoder_outputs(self.teacher, attention=bool(self.attention_weight)) as record:
            teacher_outputs = self.teacher(x, training=False)
        return y, teacher_outputs, record

    def _intermediate_losses(self, x, teacher_features):
        student_features = self._student_features
        mask = tf.cast(x["input_mask"], tf.float32)
        tokens = global_mean_weights(mask)
        losses = []
        count = len(self.layer_map)
        for j, i in enumerate(self.layer_map):
            if self.hidden_weight:
                hidden = student_features["encoder_outputs"][j]
                if self.projections:
                    hidden = self.projections[j](hidden)
                target = tf.stop_gradient(teacher_features["encoder_outputs"][i])
                losses.append(self.hidden_weight / count * self.feature_loss(target, hidden, tokens))
            if self.attention_weight:
                probs = student_features["attention_probs"][j]
                target = tf.stop_gradient(teacher_features["attention_probs"][i])
                rows = global_mean_weights(tf.broadcast_to(mask[:, None, :], tf.shape(probs)[:3]))
                losses.append(self.attention_weight / count * self.feature_loss(target, probs, rows))
        return losses

    def get_config(self):
        raise NotImplementedError("a BertDistiller is not saved: save distiller.student")

"""`TaskData`: one benchmark's data as a fine-tuning or distillation run takes it.

Whatever the benchmark (GLUE or your own TSV classification, CoNLL-2003 tagging, SQuAD
spans, embedder pairs, re-ranking), a run asks its data the same things: the head's
arguments (classes), the training batches for `fit`, the official metrics of a model on
the dev set, the metric that keeps the best model, and the files of its predictions.
`bert-keras finetune` and `distill` (and a Keras script) drive every benchmark through
this interface; each benchmark's module implements it beside its reader and scorer.
"""


class TaskData:
    """A benchmark's training and dev data for one head, and its official scorer.

    Each benchmark sets `labels` (class or tag names in id order; None where there are
    none), `main_metric` (the dev metric that keeps the best model), `train_size` and
    `dev_size` (examples: what an epoch counts, what an evaluation reads); `loss` (the
    head's loss on these targets; "auto": the head's default) and `preprocessed`
    (training batches are packed already, not raw text) default here."""

    loss = "auto"
    preprocessed = False

    def head_arguments(self):
        """Keyword arguments of the head's `from_checkpoint` that the data sets (its classes)."""
        return {}

    def prepare(self, model):
        """Set-up that needs the model's tokenizer (windows, document context); none by default."""

    def training_texts(self):
        """The training texts whose truncation a command reports; None: it reports none."""
        return None

    def train_batches(self, batch_size, seed):
        """Shuffled training batches for `fit` (raw text unless `preprocessed`)."""
        raise NotImplementedError

    def evaluate(self, model, batch_size):
        """{metric: value}: the official metrics of `model` on the dev set(s)."""
        raise NotImplementedError

    def write_predictions(self, output_dir):
        """Writes the last evaluation's predictions in the benchmark's formats; none by default."""

    def report(self):
        """The last evaluation's `training.evaluation_summaries.EvaluationReport` (per-class
        scores, a classifier's confusion matrix, worst errors); None (the default): none."""
        return None

"""The distillation run: a student of a fine-tuned task model trained through the
fine-tuning run (`finetune`: the distiller trained, the student kept as `best.keras`),
then both measured on the dev set: their metrics, sizes and speeds.
"""

import json
import time
from typing import NamedTuple

import tensorflow as tf

from bert_keras.checkpoint.text_files import write_labels
from bert_keras.recipes.finetuning import finetune
from bert_keras.tasks.distillation import BertDistiller, student_of
from bert_keras.training import distribute


class DistillationRun(NamedTuple):
    """The student with the best epoch's weights and `distill_results.json`'s contents."""

    student: object
    results: dict


def distill(
    teacher,
    student_spec,
    data,
    *,
    output_dir,
    batch_size=32,
    seed=0,
    cache_teacher=False,
    temperature=2.0,
    alpha=0.5,
    hidden_weight=0.0,
    attention_weight=0.0,
    labels_only=False,
    eval_batch_size=64,
    strategy=None,
    settings=None,
    verbose="auto",
    **training_options,
):
    """Distills `teacher` into `student_of(teacher, student_spec)` on `data` (a
    `datasets.TaskData`: its training batches, dev metrics, main metric, loss and labels;
    `cache_teacher`: a classifier's, whose batches carry the teacher's logits computed
    once); `labels_only` trains the same student on the labels alone (the baseline).
    Writes what `finetune` writes (the student's evaluation reports and best epoch's
    predictions as a fine-tuning run's), `distill_results.json` (both models' dev metrics,
    sizes and speeds, the run's `settings`) and `labels.txt` (the data's labels).
    `training_options` go to `finetune`. Returns a `DistillationRun`."""
    strategy = strategy or tf.distribute.get_strategy()
    # Once, not at each build of the batches (a run resumed inside an epoch builds them up to three times).
    cached = (
        {"teacher_outputs": data.teacher_outputs(teacher, eval_batch_size)} if cache_teacher and not labels_only else {}
    )
    teacher_metrics = data.evaluate(teacher, eval_batch_size)
    print(f"teacher: {data.main_metric} {teacher_metrics[data.main_metric]:.4f}")
    student, distiller = _distiller(
        teacher, student_spec, strategy, temperature, labels_only, alpha, hidden_weight, attention_weight
    )
    finetuned = finetune(
        distiller,
        lambda: data.train_batches(batch_size, seed, **cached),
        data.train_size,
        lambda model: data.evaluate(model.student, eval_batch_size),
        data.main_metric,
        output_dir=output_dir,
        on_best=lambda metrics: data.write_predictions(output_dir),
        report=data.report,
        saved_model=student,
        loss=data.loss,
        strategy=strategy,
        verbose=verbose,
        batch_size=batch_size,
        **training_options,
    )
    speed = _speeds(data, {"teacher": teacher, "student": student}, eval_batch_size)
    best = {key: value for key, value in finetuned.best.items() if key != "epoch"}
    results = {
        "teacher": {**teacher_metrics, "parameters": teacher.count_params(), "examples_per_second": speed["teacher"]},
        "student": {
            **best,
            "spec": student_spec,
            "parameters": student.count_params(),
            "examples_per_second": speed["student"],
        },
        "labels_only": bool(labels_only),
        "temperature": temperature,
        "alpha": 0.0 if labels_only else alpha,
        **(settings or {}),
        "training_set": data.train_size,
        "train_seconds": finetuned.evaluations[-1]["train_seconds"],
        "evaluations": finetuned.evaluations[:-1],
    }
    _write_results(output_dir, strategy, results, data.labels)
    main, teacher_value = data.main_metric, teacher_metrics[data.main_metric]
    ratio = best[main] / teacher_value if teacher_value else float("nan")
    print(
        f"{main}: teacher {teacher_value:.4f}, student {best[main]:.4f} "
        f"({ratio:.1%} of the teacher's); {speed['student']} vs {speed['teacher']} examples/s"
    )
    return DistillationRun(student, results)


def _distiller(teacher, student_spec, strategy, temperature, labels_only, alpha, hidden_weight, attention_weight):
    """(the student, the `BertDistiller` that trains it), made in `strategy`'s scope."""
    weights = {"alpha": alpha, "hidden_weight": hidden_weight, "attention_weight": attention_weight}
    with strategy.scope():
        student = student_of(teacher, student_spec)
        distiller = BertDistiller(
            teacher, student, temperature=temperature, **{k: 0.0 if labels_only else v for k, v in weights.items()}
        )
    config = student.encoder.config
    print(
        f"student {student_spec}: L{config.num_hidden_layers}/H{config.hidden_size}, "
        f"{student.count_params():,} parameters (teacher {teacher.count_params():,}); "
        + ("labels only" if labels_only else f"temperature {temperature}, alpha {alpha}")
    )
    return student, distiller


def _write_results(output_dir, strategy, results, labels):
    """`distill_results.json` and `labels.txt` (when the data has labels), on the chief."""
    with distribute.chief_path(output_dir, strategy) as chief_dir:
        (chief_dir / "distill_results.json").write_text(json.dumps(results, indent=2) + "\n")
        if labels:
            write_labels(labels, chief_dir / "labels.txt")


def _speeds(data, models, batch_size):
    """Dev examples a second of each model through the whole evaluation, timed one after
    the other now (both evaluated before: traced and warm), as a shared machine's load
    changes over a run."""
    speed = {}
    for name, model in models.items():
        start = time.perf_counter()
        data.evaluate(model, batch_size)
        speed[name] = round(data.dev_size / (time.perf_counter() - start), 1)
    return speed

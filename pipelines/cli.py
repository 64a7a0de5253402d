"""The `bert-keras` command: one sub-command per pipeline module.

Each pipeline module exposes `register(subparsers)`, which adds its sub-command
and sets `func` on the parser's defaults to a callable taking the parsed args.
"""

import argparse
import importlib
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ start-up chatter out

PIPELINES = ("demo", "convert", "vocab", "create_pretraining_data", "pretrain", "finetune", "extract_features", "export", "serve", "plot")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bert-keras",
        description="BERT on TensorFlow 2 / Keras 3: convert, pre-train, fine-tune, export.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in PIPELINES:
        importlib.import_module(f"pipelines.{name}").register(subparsers)
    return parser


def warning_line(message, category, filename, lineno, line=None):
    """Warnings as one line each, like errors: no source file and line of code."""
    return f"bert-keras: warning: {message}\n"


def main(argv=None):
    args = build_parser().parse_args(argv)
    warnings.formatwarning = warning_line
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError) as error:
        print(f"bert-keras {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

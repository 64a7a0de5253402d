"""The `bert-keras` command: one sub-command per pipeline module.

Each pipeline module exposes `register(subparsers)`, which adds its sub-command
and sets `func` on the parser's defaults to a callable taking the parsed args.
Parsing imports no TensorFlow (`--help` answers at once); TensorFlow's C++ start-up
lines are kept out (`bert_keras_cli.startup`: the command's doing, not the library's) unless
`TF_CPP_MIN_LOG_LEVEL` is set (0 shows them all); a user's error or Ctrl-C ends in one
line, not a traceback.
"""

import argparse
import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import threading
import warnings

from bert_keras_cli.arguments import check_input_paths
from bert_keras_cli.startup import quiet_start_up

# Commands that go on where they stopped when run again.
RESUMABLE = {
    "pretrain": "run the same command again to resume from the last checkpoint",
    "finetune": "run the same command again to resume from the last backup",
    "distill": "run the same command again to resume from the last backup",
    "demo": "run the same command again to go on where it stopped",
    "create-pretraining-data": "run the same command again: finished shards are kept",
    "predict": "run the same command again: finished chunks are kept",
}
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ConnectionError,
)

PIPELINES = (
    "demo",
    "convert",
    "vocab",
    "create_pretraining_data",
    "pretrain",
    "finetune",
    "distill",
    "embed",
    "predict",
    "extract_features",
    "export",
    "push",
    "serve",
    "plot",
)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bert-keras",
        description="BERT on TensorFlow 2 / Keras 3: convert, pre-train, fine-tune, export.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in PIPELINES:
        importlib.import_module(f"bert_keras_cli.{name}").register(subparsers)
    return parser


def warning_line(message, category, filename, lineno, line=None):
    """Warnings as one line each, like errors: no source file and line of code."""
    return f"bert-keras: warning: {message}\n"


def stop_on_interrupt(command):
    """Ctrl-C ends the command at once with one line. A KeyboardInterrupt raised inside
    TensorFlow (while it traces a graph, say) comes out as a long error instead, and the
    resumable commands are built to survive being killed at any point."""
    hint = RESUMABLE.get(command)

    def stop(signum, frame):
        sys.stdout.flush()
        print(f"\nbert-keras {command}: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr, flush=True)
        os._exit(130)

    return signal.signal(signal.SIGINT, stop)


@contextlib.contextmanager
def package_without_tensorflow():
    """`bert_keras` without running its `__init__` (TensorFlow, tf.text and every class: seconds),
    for a command that sets `tensorflow=False` (it imports only modules that need neither);
    forgotten afterwards, so that a later `import bert_keras` in this process runs in full."""
    if "bert_keras" in sys.modules:
        yield
        return
    sys.modules["bert_keras"] = importlib.util.module_from_spec(importlib.util.find_spec("bert_keras"))
    try:
        yield
    finally:
        for name in [name for name in sys.modules if name == "bert_keras" or name.startswith("bert_keras.")]:
            del sys.modules[name]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    formatwarning, warnings.formatwarning = warnings.formatwarning, warning_line
    # Once per process: a command run by another (the demo's stages) keeps the outer one's hint.
    outermost = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    previous = stop_on_interrupt(args.command) if outermost else None
    try:
        with package_without_tensorflow():
            check_input_paths(args)  # before TensorFlow loads (seconds)
        if not getattr(args, "tensorflow", True):
            with package_without_tensorflow():
                return args.func(args) or 0
        with quiet_start_up():
            import bert_keras  # noqa: F401  TensorFlow and tf.text, without their C++ start-up lines

        return args.func(args) or 0
    except USER_ERRORS as error:
        print(f"bert-keras {args.command}: error: {error}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = formatwarning  # main() may run inside another program (tests)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())

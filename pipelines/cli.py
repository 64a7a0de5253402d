"""The `bert-keras` command: one sub-command per pipeline module.

Each pipeline module exposes `register(subparsers)`, which adds its sub-command
and sets `func` on the parser's defaults to a callable taking the parsed args.
Parsing imports no TensorFlow (`--help` answers at once); TensorFlow's C++ start-up
lines are kept out unless `TF_CPP_MIN_LOG_LEVEL` is set (0 shows them all); a user's
error or Ctrl-C ends in one line, not a traceback.
"""

import argparse
import contextlib
import importlib
import os
import re
import signal
import sys
import tempfile
import threading
import warnings

# Start-up chatter, before and after TensorFlow's logging starts: info lines, the CUDA probe
# of a CPU-only machine (`E0000 ... cuInit`), oneDNN notes. Python errors still show.
START_UP_LINES = re.compile(
    r"^(?:[IWE]\d{4} [\d:.]+ +\d+ \S+\] |WARNING: All log messages before absl::InitializeLog\(\)"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags)"
)
# Commands that go on where they stopped when run again.
RESUMABLE = {
    "pretrain": "run the same command again to resume from the last checkpoint",
    "demo": "run the same command again to go on where it stopped",
    "create-pretraining-data": "run the same command again: finished shards are kept",
}
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)

PIPELINES = (
    "demo",
    "convert",
    "vocab",
    "create_pretraining_data",
    "pretrain",
    "finetune",
    "distill",
    "embed",
    "extract_features",
    "export",
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
        importlib.import_module(f"pipelines.{name}").register(subparsers)
    return parser


def warning_line(message, category, filename, lineno, line=None):
    """Warnings as one line each, like errors: no source file and line of code."""
    return f"bert-keras: warning: {message}\n"


@contextlib.contextmanager
def quiet_start_up():
    """TensorFlow imported with its C++ start-up lines filtered out of stderr (file
    descriptor 2, where C++ writes); any other line written meanwhile is passed on."""
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        yield
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # after start-up: errors too (the cuInit probe)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not START_UP_LINES.match(line):
                    sys.stderr.write(line)


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


def main(argv=None):
    args = build_parser().parse_args(argv)
    formatwarning, warnings.formatwarning = warnings.formatwarning, warning_line
    # Once per process: a command run by another (the demo's stages) keeps the outer one's hint.
    outermost = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    previous = stop_on_interrupt(args.command) if outermost else None
    try:
        with quiet_start_up():
            import tensorflow  # noqa: F401
            import tensorflow_text  # noqa: F401
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

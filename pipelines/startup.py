"""TensorFlow imported without its C++ start-up lines, for programs (standard library only).

On a CPU-only machine `import tensorflow` and its first op write lines such as
`E0000 ... failed call to cuInit` and `Could not find cuda drivers` to file descriptor 2,
below Python's `sys.stderr`. The `bert-keras` commands and `serving/smoke.py` import
TensorFlow through `quiet_start_up`, which drops those lines and sets
`TF_CPP_MIN_LOG_LEVEL=3` for what follows; any other line still shows, and a
`TF_CPP_MIN_LOG_LEVEL` set beforehand (0 shows everything) is kept. The library itself
(`import bert_keras`) leaves the process's environment and file descriptors alone.
"""

import contextlib
import os
import re
import sys
import tempfile

# Start-up chatter, before and after TensorFlow's logging starts: info lines, the CUDA probe
# of a CPU-only machine (`E0000 ... cuInit`), oneDNN notes. Python errors still show.
START_UP_LINES = re.compile(
    r"^(?:[IWE]\d{4} [\d:.]+ +\d+ \S+\] |WARNING: All log messages before absl::InitializeLog\(\)"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags)"
)


@contextlib.contextmanager
def quiet_start_up():
    """TensorFlow imported in this block has its C++ start-up lines filtered out of
    stderr (file descriptor 2, where C++ writes); any other line written meanwhile is
    passed on. A no-op once TensorFlow is loaded or where TF_CPP_MIN_LOG_LEVEL is set."""
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        yield
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # after start-up: errors too (the cuInit probe)
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (a detached process): nothing to filter
        yield
        return
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

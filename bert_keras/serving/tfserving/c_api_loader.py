"""TF Serving's C++ SavedModel loader, driven from Python through TensorFlow's C API.

`CApiPredictor` runs an export in a small C program (`c_api_predict.c`, compiled with
gcc on first use against the TensorFlow wheel's `libtensorflow_cc`) that loads it with
`TF_LoadSessionFromSavedModel`. That function wraps `tensorflow::LoadSavedModel`
(tensorflow/tensorflow: tensorflow/c/c_api.cc), the loader `tensorflow_model_server`
calls (tensorflow/serving: tensorflow_serving/session_bundle/oss/session_bundle_util.cc,
used by servables/tensorflow/saved_model_bundle_factory.cc). The program's process has
no Python TensorFlow in it, so the only tf.text ops it knows are those of the op
libraries it is given: the ones the target TF Serving release links. An export that
needs a newer op fails to load there, as it would in that server.
"""

import functools
import hashlib
import importlib.util
import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_keras.serving.layout import serving_signatures
from bert_keras.serving.ops import SERVING_RELEASE_OF_OP, release_version
from bert_keras.serving.tfserving.session import (
    STATUS_CODES,
    ServingError,
    checked_request,
    make_request,
    warmup_requests,
)

SOURCE = Path(__file__).with_name("c_api_predict.c")
TF_OK = 0


class CApiError(RuntimeError):
    """The C-API loader could not be built, or could not load an export."""


class Unavailable(CApiError):
    """The C-API loader cannot be built or started on this machine (no gcc, a compile or
    link that fails against the TensorFlow wheel's private layout, an unwritable cache):
    its check cannot run, which says nothing about an export. The first line of the
    message is the `reason`; the rest, the compiler's command and output."""

    @property
    def reason(self):
        return str(self).splitlines()[0]


class NoCompiler(Unavailable):
    """gcc is missing, so the C-API loader cannot be built on this machine."""


def build(cache_dir=None):
    """The compiled `c_api_predict`, built on first use.

    Cached under `cache_dir` (default `$XDG_CACHE_HOME/bert_keras/c_api`) in a folder
    named by a hash of the source, the TensorFlow version and the wheel's location.
    """
    compiler = shutil.which("gcc")
    if compiler is None:
        raise NoCompiler("gcc is not on PATH: the C-API SavedModel loader cannot be compiled")
    lib = Path(tf.sysconfig.get_lib())
    key = hashlib.sha256(SOURCE.read_bytes() + f"{tf.__version__}\0{lib}".encode()).hexdigest()[:16]
    if cache_dir is None:
        cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bert_keras" / "c_api"
    binary = Path(cache_dir) / key / "c_api_predict"
    if binary.exists():
        return binary
    try:
        binary.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise Unavailable(f"the C-API loader's build cache {binary.parent} cannot be written: {error}") from None
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
    command = [
        compiler,
        "-O2",
        "-std=c11",
        "-Wall",
        "-o",
        str(partial),
        str(SOURCE),
        f"-I{tf.sysconfig.get_include()}",
        f"-L{lib}",
        "-l:libtensorflow_cc.so.2",
        *tf.sysconfig.get_link_flags(),
        f"-Wl,-rpath,{lib}",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        raise Unavailable(f"compiling {SOURCE.name} failed: {compiler} did not run: {error}") from None
    if result.returncode != 0:
        summary = _first_error(result.stderr) or f"{compiler} exited with {result.returncode}"
        raise Unavailable(f"compiling {SOURCE.name} failed: {summary}\n$ {' '.join(command)}\n{result.stderr}")
    partial.replace(binary)  # atomic, so a concurrent build never runs half a file
    return binary


def _first_error(output):
    """The compiler's first `error:` line (else its last line), stripped."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if re.search(r"\berror:", line)), lines[-1] if lines else "")


@functools.cache
def text_op_libraries(binary):
    """{tf.text op library (.so) path: names of the ops it registers}, as the C API lists them."""
    from tensorflow.core.framework import op_def_pb2

    folder = Path(importlib.util.find_spec("tensorflow_text").origin).parent / "python" / "ops"
    paths = sorted(str(path) for path in folder.glob("_*.so"))
    try:
        result = subprocess.run([str(binary), "--ops", *paths], capture_output=True)
    except OSError as error:
        raise Unavailable(f"the C-API loader {binary} did not start: {error}") from None
    if result.returncode != 0:  # before any export is read: the loader itself does not run here
        raise Unavailable(f"listing the ops of tf.text's libraries failed: {_tail(result.stderr)}")
    stream = io.BytesIO(result.stdout)
    libraries = {}
    for _ in paths:
        path = _read_str(stream.read).decode()
        libraries[path] = [op.name for op in op_def_pb2.OpList.FromString(_read_str(stream.read)).op]
    return libraries


def serving_op_libraries(binary, serving_release):
    """The tf.text op libraries that TF Serving `serving_release` links.

    A library is loaded when it registers ops we may emit (`SERVING_RELEASE_OF_OP`)
    and that release links every one of them; the other libraries hold no op our
    exports use.
    """
    target = release_version(serving_release)
    chosen = []
    for path, ops in text_op_libraries(binary).items():
        releases = [release_version(SERVING_RELEASE_OF_OP[op]) for op in ops if op in SERVING_RELEASE_OF_OP]
        if releases and max(releases) <= target:
            chosen.append(path)
    return chosen


class CApiPredictor:
    """One export, loaded by `TF_LoadSessionFromSavedModel` in a child process.

    `predict(signature, **inputs)` feeds the SignatureDef's tensors (names taken from
    the MetaGraphDef the loader returns) and returns numpy outputs; strings come back
    as bytes objects. Warm-up requests are replayed at load, as TF Serving does.
    """

    def __init__(self, export_path, serving_release="2.12", tags=("serve",), replay_warmup=True):
        from tensorflow.core.protobuf import meta_graph_pb2

        binary = build()
        self.export_path = Path(export_path)
        self.serving_release = serving_release
        libraries = serving_op_libraries(binary, serving_release)
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._send(
            _u32(len(libraries))
            + b"".join(_str(path.encode()) for path in libraries)
            + _str(str(self.export_path).encode())
            + _u32(len(tags))
            + b"".join(_str(tag.encode()) for tag in tags)
        )
        code, message = self._read_status()
        if code != TF_OK:
            self.close()
            raise CApiError(f"TF_LoadSessionFromSavedModel({self.export_path}) failed: {self._error(code, message)}")
        meta_graph = meta_graph_pb2.MetaGraphDef.FromString(_read_str(self._read))
        self.signatures = serving_signatures(meta_graph)
        try:
            self.warmup_outputs = self.replay_warmup() if replay_warmup else []
        except ServingError as error:
            self.close()
            raise CApiError(
                f"a warm-up request of {self.export_path} failed, so TF Serving would not load it: {error}"
            ) from None

    def replay_warmup(self):
        return [self.predict_request(request) for request in warmup_requests(self.export_path)]

    def predict(self, signature="serving_default", **inputs):
        """Named inputs (lists of str or bytes for strings, arrays for ids) -> dict of numpy."""
        return self.predict_request(make_request("c_api", signature, inputs))

    def predict_request(self, request):
        """A `PredictRequest` -> dict of numpy outputs (all of the signature's, or its output_filter)."""
        _, signature, inputs, outputs = checked_request(self.signatures, request)
        body = [_u32(len(inputs))]
        for key, value in inputs.items():
            body.append(_str(signature.inputs[key].name.encode()) + _tensor(value, signature.inputs[key].dtype))
        body.append(_u32(len(outputs)) + b"".join(_str(signature.outputs[key].name.encode()) for key in outputs))
        self._send(b"".join(body))
        code, message = self._read_status()
        if code != TF_OK:
            raise ServingError(self._error(code, message))
        if _read_u32(self._read) != len(outputs):
            raise CApiError(f"the C-API loader of {self.export_path} answered the wrong number of outputs")
        return {key: self._read_tensor() for key in outputs}

    def close(self):
        if self._process.stdin and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, data):
        try:
            self._process.stdin.write(data)
            self._process.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None

    def _read(self, size):
        data = self._process.stdout.read(size)
        if len(data) != size:
            raise self._died()
        return data

    def _read_status(self):
        code = _read_u32(self._read)
        return code, _read_str(self._read).decode("utf-8", "replace")

    def _read_tensor(self):
        dtype = tf.dtypes.as_dtype(_read_u32(self._read))
        rank = _read_u32(self._read)
        shape = struct.unpack(f"<{rank}q", self._read(8 * rank))
        count = int(np.prod(shape, dtype=np.int64))
        if dtype == tf.string:
            strings = np.empty(count, dtype=object)
            strings[:] = [_read_str(self._read) for _ in range(count)]
            return strings.reshape(shape)
        numpy_dtype = np.dtype(dtype.as_numpy_dtype).newbyteorder("<")
        return np.frombuffer(self._read(count * numpy_dtype.itemsize), numpy_dtype).reshape(shape)

    def _died(self):
        code = self._process.wait()
        self._log.seek(0)
        return CApiError(f"the C-API loader of {self.export_path} exited with code {code}: {_tail(self._log.read())}")

    def _error(self, code, message):
        """`CODE: message`, plus the release that links an op the message says is missing."""
        text = f"{STATUS_CODES[code]}: {message}"
        missing = re.search(r"Op type not registered '([^']+)'", message)
        if missing and missing.group(1) in SERVING_RELEASE_OF_OP:
            op = missing.group(1)
            text += (
                f"\n{op} is linked by TF Serving >= {SERVING_RELEASE_OF_OP[op]}, "
                f"not by the target release {self.serving_release}"
            )
        return text


def _u32(value):
    return struct.pack("<I", value)


def _str(data):
    return struct.pack("<Q", len(data)) + data


def _tensor(array, dtype_enum):
    header = _u32(dtype_enum) + _u32(array.ndim) + struct.pack(f"<{array.ndim}q", *array.shape)
    if dtype_enum == tf.string.as_datatype_enum:
        return header + b"".join(_str(value) for value in array.ravel())
    return header + np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()


def _read_u32(read):
    return struct.unpack("<I", read(4))[0]


def _read_str(read):
    (size,) = struct.unpack("<Q", read(8))
    return read(size)


def _tail(log, lines=20):
    text = log.decode("utf-8", "replace") if isinstance(log, bytes) else log
    return "\n".join(text.strip().splitlines()[-lines:])


def check_against_session(export_path, session_predictor, serving_release="2.12", atol=1e-5):
    """Loads an export in TF Serving's C++ loader and checks its warm-up answers.

    The C-API loader replays the warm-up requests (any failure fails the load, as in
    TF Serving); each output must equal the TF1 session loader's `warmup_responses`
    (floats within `atol`, everything else exactly). Returns the number of requests.
    """
    from bert_keras.serving.tfserving.session import decode_response

    with CApiPredictor(export_path, serving_release) as predictor:
        for index, (ours, theirs) in enumerate(zip(predictor.warmup_outputs, session_predictor.warmup_responses)):
            for key, expected in decode_response(theirs).items():
                got = ours[key]
                same = (
                    np.allclose(got, expected, rtol=0, atol=atol)
                    if expected.dtype.kind == "f"
                    else np.array_equal(got, expected)
                )
                if got.shape != expected.shape or not same:
                    raise CApiError(
                        f"{export_path}: warm-up request {index} output {key!r} differs between "
                        f"TF Serving's C++ loader and the TF1 session loader"
                    )
        return len(predictor.warmup_outputs)

"""Smoke and load check of a served bert-keras model over gRPC or REST.

Sends a bounded number of requests (at most --requests, for at most --seconds) from
--concurrency threads, checks every answer is finite, and prints latency percentiles
and throughput. Point it only at servers you run (default: this machine).

    python serving/smoke.py --model bert --protocol grpc --requests 200 --concurrency 4
"""

import argparse
import statistics
import sys
import threading
import time

import numpy as np

from bert_keras_cli.startup import quiet_start_up

with quiet_start_up():  # a program, like the `bert-keras` commands: no TensorFlow C++ start-up lines
    from bert_keras.serving.client import ServingClient
    from bert_keras.serving.tfserving.session import ServingError

TEXTS = [
    "a gripping, beautifully acted film",
    "",
    "It was the best of times, it was the worst of times.",
    "Ünïcödé, 中文 and emoji 🙂",
]


def request_inputs(client, protocol, names=None):
    """serving_default's string inputs, from the model's signature (GetModelMetadata):
    [batch] strings get TEXTS, [batch, n] ones (multiple-choice `choices`) two copies each."""
    signature = (client.metadata() if protocol == "grpc" else client.metadata_rest())["serving_default"]
    inputs = {
        name: len(spec.get("tensorShape", spec.get("tensor_shape", {})).get("dim", []))
        for name, spec in sorted(signature["inputs"].items())
        if spec["dtype"] == "DT_STRING"
    }
    if names:
        unknown = sorted(set(names) - set(inputs))
        if unknown:
            raise SystemExit(f"serving_default has no string inputs {unknown}; it has {sorted(inputs)}")
        inputs = {name: inputs[name] for name in names}
    return {name: TEXTS if rank == 1 else [[text, text] for text in TEXTS] for name, rank in inputs.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="bert")
    parser.add_argument("--protocol", choices=("grpc", "rest"), default="grpc")
    parser.add_argument("--grpc-port", type=int, default=8500)
    parser.add_argument("--rest-port", type=int, default=8501)
    parser.add_argument(
        "--input", nargs="+", help="string input names (default: serving_default's, from the model's metadata)"
    )
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)

    client = ServingClient(args.host, args.model, args.grpc_port, args.rest_port, timeout=30)
    request = request_inputs(client, args.protocol, args.input)
    print(f"serving_default inputs: {', '.join(request)}")
    started = time.perf_counter()
    latencies, failures = send_requests(client, args.protocol, request, args.requests, args.concurrency, args.seconds)
    elapsed = time.perf_counter() - started
    print(
        f"{args.protocol} {args.host} model {args.model}: {len(latencies)} ok, {len(failures)} failed "
        f"in {elapsed:.1f} s ({len(latencies) * len(TEXTS) / elapsed:.1f} texts/s)"
    )
    if latencies:
        q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
        print(
            f"latency per request of {len(TEXTS)} texts: p50 {q[49] * 1e3:.1f} ms, "
            f"p95 {q[94] * 1e3:.1f} ms, p99 {q[98] * 1e3:.1f} ms"
        )
    for failure in failures[:3]:
        print(f"failure: {failure}", file=sys.stderr)
    return 1 if failures or not latencies else 0


def send_requests(client, protocol, request, requests, concurrency, seconds):
    """(latencies of the answered requests, failures) of up to `requests` requests in `seconds`."""
    latencies, failures, lock = [], [], threading.Lock()
    deadline = time.monotonic() + seconds
    counter = iter(range(requests))

    def worker():
        while time.monotonic() < deadline:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            start = time.perf_counter()
            try:
                check_answer(client, protocol, request)
            except ServingError as error:
                with lock:
                    failures.append(str(error))
                continue
            with lock:
                latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, failures


def check_answer(client, protocol, request):
    """One request; a `ServingError` unless every float output is finite."""
    if protocol == "grpc":
        outputs = client.predict(**request)
        values = [v for v in outputs.values() if v.dtype.kind == "f"]
    else:
        rows = client.predict_rest(**request)
        values = [
            np.asarray(v, float)
            for row in rows
            for v in row.values()
            if isinstance(v, (float, list)) and not _has_text(v)
        ]
    if not all(np.isfinite(v).all() for v in values):
        raise ServingError("non-finite output")


def _has_text(value):
    return isinstance(value, str) or (isinstance(value, list) and any(_has_text(v) for v in value))


if __name__ == "__main__":
    sys.exit(main())

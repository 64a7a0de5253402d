"""`bert-keras serve` under concurrent load, and an oversized request, as clients meet it.

Starts `bert-keras serve` on an export in its own process (default: a BERT-Tiny-shaped
classifier with random weights, exported here; `--model-base` serves yours), then for 1,
16, 64 and 256 concurrent clients, each on its own keep-alive connection (REST) or channel
(gRPC), sends `--requests` requests of `--texts` short texts and reports requests/s,
p50/p99 latency and failed requests (a reset, refusal or non-200 answer). Last, a 50 MB
REST body: the time to its 413 answer, the server's RSS growth, and a normal answer
after it. Only loopback addresses are used; every loop is bounded.

    python bench/bench_serving_load.py [--model-base DIR] [--requests 4]
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measure import Report, add_json_argument, machine_line  # noqa: E402

TEXTS = [
    "a gripping, beautifully acted film",
    "It was the best of times, it was the worst of times.",
    "",
    "the quick brown fox jumps over the lazy dog",
]


def tiny_export(folder):
    from bert_keras import BertClassifier, BertConfig, BertEncoder, BertPreprocessor, BertTokenizer
    from bert_keras.serving.export import export_for_serving

    vocab = ROOT.parent / "shared" / "data" / "vocab" / "vocab.txt"
    config = BertConfig.preset("tiny", vocab_size=30522)
    preprocessor = BertPreprocessor(BertTokenizer(str(vocab)), seq_length=None, max_seq_length=128)
    export_for_serving(BertClassifier(BertEncoder(config), 2), preprocessor, folder, labels=["neg", "pos"])
    return folder


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(model_base, code=ROOT):
    rest, grpc = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(code)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bert_keras_cli.cli",
            "serve",
            str(model_base),
            "--name",
            "bert",
            "--rest-port",
            str(rest),
            "--grpc-port",
            str(grpc),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=code,
    )
    line = process.stdout.readline()
    if not line.startswith("serving"):
        process.kill()
        raise SystemExit(f"bert-keras serve did not start: {line!r}")
    return process, rest, grpc


def rest_client(port, requests, body):
    latencies, failures = [], []
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for _ in range(requests):
            began = time.perf_counter()
            connection.request("POST", "/v1/models/bert:predict", body=body)
            reply = connection.getresponse()
            reply.read()
            if reply.status != 200:
                failures.append(f"HTTP {reply.status}")
            else:
                latencies.append(time.perf_counter() - began)
        connection.close()
    except (OSError, http.client.HTTPException) as caught:
        failures.append(f"{type(caught).__name__}: {caught}")
    return latencies, failures


def grpc_client(port, requests, texts):
    from bert_keras.serving.client import ServingClient  # imported before the clock starts, in main
    from bert_keras.serving.tfserving.session import ServingError

    latencies, failures = [], []
    client = ServingClient("127.0.0.1", "bert", grpc_port=port, timeout=300, retries=0)
    for _ in range(requests):
        began = time.perf_counter()
        try:
            client.predict(text=texts)
            latencies.append(time.perf_counter() - began)
        except ServingError as caught:
            failures.append(str(caught)[:80])
    return latencies, failures


def load(clients, run):
    """`clients` threads each running `run()` -> (latencies, failures), started together."""
    barrier, results = threading.Barrier(clients), []
    lock = threading.Lock()

    def client():
        barrier.wait()
        outcome = run()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    latencies = sorted(x for lat, _ in results for x in lat)
    failures = [f for _, fail in results for f in fail]
    return latencies, failures, elapsed


def oversized(port, pid, size=50 << 20):
    before = rss_mb(pid)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        began = time.perf_counter()
        sock.sendall(b"POST /v1/models/bert:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        sent, chunk, reply = 0, b" " * (1 << 20), b""
        sock.settimeout(0.05)
        while sent < size and not reply:
            try:
                sent += sock.send(chunk)
            except (TimeoutError, BlockingIOError):
                pass
            except OSError:
                break
            try:
                reply = sock.recv(65536)
            except TimeoutError:
                pass
        sock.settimeout(30)
        while not reply.startswith(b"HTTP/1.1 ") or b"\r\n\r\n" not in reply:
            more = sock.recv(65536)
            if not more:
                break
            reply += more
        seconds = time.perf_counter() - began
    return reply.split(b"\r\n", 1)[0].decode(), seconds, sent, rss_mb(pid) - before


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base", help="an export's base folder (default: a tiny classifier made here)")
    parser.add_argument("--requests", type=int, default=4, help="requests per client")
    parser.add_argument("--texts", type=int, default=4, help="texts per request")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument(
        "--server-code",
        default=str(ROOT),
        help="a checkout whose `bert-keras serve` to run, e.g. a worktree of an earlier commit",
    )
    add_json_argument(parser)
    args = parser.parse_args(argv)
    report = Report("bench_serving_load", vars(args))

    import bert_keras.serving.client  # noqa: F401  (TensorFlow's import is not a request's latency)

    with tempfile.TemporaryDirectory() as scratch:
        model_base = args.model_base or tiny_export(Path(scratch) / "tiny")
        process, rest, grpc = start_server(model_base, Path(args.server_code))
        try:
            texts = (TEXTS * args.texts)[: args.texts]
            body = json.dumps({"instances": [{"text": t} for t in texts]}).encode()
            print(
                f"bert-keras serve {model_base} (code: {args.server_code}); {machine_line(report.machine)}; "
                f"{args.requests} requests of {args.texts} texts per client\n"
            )
            print("| protocol | clients | requests | failed | requests/s | p50 ms | p99 ms | server RSS MB |")
            print("|---|---|---|---|---|---|---|---|")
            for protocol, run in (
                ("REST", lambda: rest_client(rest, args.requests, body)),
                ("gRPC", lambda: grpc_client(grpc, args.requests, texts)),
            ):
                for clients in args.clients:
                    latencies, failures, elapsed = load(clients, run)
                    p50 = statistics.median(latencies) * 1e3 if latencies else float("nan")
                    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3 if latencies else 0
                    print(
                        f"| {protocol} | {clients} | {clients * args.requests} | {len(failures)} | "
                        f"{len(latencies) / elapsed:.1f} | {p50:.0f} | {p99:.0f} | {rss_mb(process.pid):.0f} |",
                        flush=True,
                    )
                    if failures:
                        print(f"  e.g. {failures[0]}")
                    report.add(
                        f"{protocol}, {clients} clients",
                        "ms",
                        latencies or [float("nan")],
                        scale=1e3,
                        failed=len(failures),
                        requests_per_second=len(latencies) / elapsed,
                        p99_ms=p99,
                        server_rss_mb=rss_mb(process.pid),
                    )
            status, seconds, sent, grown = oversized(rest, process.pid)
            after, _ = rest_client(rest, 1, body)
            print(
                f"\n50 MB REST body: '{status}' after {seconds:.2f} s ({sent / 1e6:.1f} MB sent by then); "
                f"server RSS grew {grown:.0f} MB; a normal request afterwards: {'answered' if after else 'FAILED'}"
            )
            report.add("50 MB REST body", "s", [seconds], status=status, rss_grown_mb=grown, answered_after=bool(after))
            if args.json:
                report.write(args.json)
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()

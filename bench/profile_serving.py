"""Where a served forward's time goes, kernel by kernel, for the export or ONNX Runtime.

Exports a random BERT encoder, loads it with the TF1 session loader and runs `serve_ids`
with a full trace (`RunMetadata` step stats, the per-kernel times TF Serving's own
profiler reports). `--runtime onnxruntime` profiles the peer of `bench_serving.py`
instead (the Hugging Face model exported to ONNX) with ONNX Runtime's profiler. Kernel
time is grouped by kind: dense matmuls (with whatever bias, GELU or residual add each
runtime fuses into them), attention matmuls, transposes, LayerNorm, softmax, the rest;
the matmul groups are also shown against the machine's measured fp32 matmul peak.
Tracing adds a little time to every kernel, most visible at batch 1.

    python bench/profile_serving.py [--batch-size 32] [--compute-dtype bfloat16]
    python bench/profile_serving.py --runtime onnxruntime   # needs the bench_serving.py peers
"""

import argparse
import collections
import json
import multiprocessing
import os
import statistics
import time

from bench_encoder import make_inputs, matmul_peak_gflops
from bench_serving import export_random_encoder, onnx_feed, onnxruntime_session, scratch_dir

GROUPS = ("dense matmuls", "attention matmuls", "transposes", "LayerNorm", "softmax", "everything else")


def group_of(kernel, node):
    """The group of a kernel (TF: `_MklNativeFusedMatMul`...; ONNX Runtime: `MatMul`...)
    from its type and node name (the HF graph names its attention matmuls `.../self/MatMul*`)."""
    if "MatMul" in kernel or "Gemm" in kernel:
        return "attention matmuls" if "BatchMatMul" in kernel or "/self/MatMul" in node else "dense matmuls"
    for group, key in (("transposes", "Transpose"), ("LayerNorm", "LayerNorm"), ("softmax", "Softmax")):
        if key in kernel:
            return group
    return "everything else"


def timed(run, runs):
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        walls.append((time.perf_counter() - start) * 1e3)
    return walls


def export_profile(config, inputs, runs, compute_dtype):
    """(untraced wall ms per run, [{group: kernel ms} per traced run], {group: kernels per run})."""
    import tensorflow as tf

    from bert_keras.serving.tfserving.session import SessionPredictor

    predictor = SessionPredictor(export_random_encoder(config, compute_dtype))
    signature = predictor.signatures["serve_ids"]
    feed = {signature.inputs[name].name: value for name, value in inputs.items()}
    fetch = signature.outputs["pooled_output"].name
    for _ in range(2):
        predictor.session.run(fetch, feed)
    walls = timed(lambda: predictor.session.run(fetch, feed), runs)
    traces, launches = [], collections.Counter()
    for _ in range(runs):
        metadata = tf.compat.v1.RunMetadata()
        predictor.session.run(
            fetch,
            feed,
            run_metadata=metadata,
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
        )
        totals = collections.Counter()
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                # timeline_label reads "name = Kernel(inputs)"; nodes without one are bookkeeping.
                kernel = node.timeline_label.split("=", 1)[-1].split("(")[0].strip() or node.node_name
                group = group_of(kernel, node.node_name)
                totals[group] += (node.op_end_rel_micros - node.op_start_rel_micros) / 1e3
                launches[group] += 1
        traces.append(totals)
    return walls, traces, {group: count // runs for group, count in launches.items()}


def onnxruntime_profile(config, inputs, runs):
    """As `export_profile`, for ONNX Runtime: profiled runs first, then untraced ones."""
    session = onnxruntime_session(config, profile_prefix=os.path.join(scratch_dir(), "onnxruntime"))
    feed = onnx_feed(inputs)
    traced = 2 + runs  # the profiler records the warm-up too; only the last `runs` are kept
    for _ in range(traced):
        session.run(["pooler_output"], feed)
    with open(session.end_profiling()) as trace_file:
        events = json.load(trace_file)
    run_starts = sorted(event["ts"] for event in events if event["name"] == "model_run")[-runs:]
    traces, launches = [collections.Counter() for _ in run_starts], collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= run_starts[0]:
            group = group_of(event["args"]["op_name"], event["name"])
            run = sum(event["ts"] >= start for start in run_starts) - 1
            traces[run][group] += event["dur"] / 1e3
            launches[group] += 1
    walls = timed(lambda: session.run(["pooler_output"], feed), runs)
    return walls, traces, {group: count // runs for group, count in launches.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--runtime", choices=["export", "onnxruntime"], default="export")
    parser.add_argument(
        "--compute-dtype", choices=["float32", "bfloat16"], help="of the export (default: the encoder's own, float32)"
    )
    parser.add_argument("--runs", type=int, default=5, help="untraced runs for the wall time, and as many traced runs")
    args = parser.parse_args()

    from bert_keras.config import BertConfig

    config = BertConfig.preset(args.preset).to_original_dict()
    peak = matmul_peak_gflops()
    inputs = make_inputs(config, args.batch_size, args.seq)
    if args.runtime == "onnxruntime":  # PyTorch (for the ONNX export) never shares a process with TF
        with multiprocessing.get_context("spawn").Pool(1) as worker:
            walls, traces, launches = worker.apply(onnxruntime_profile, (config, inputs, args.runs))
        name = "ONNX Runtime (HF model), float32"
    else:
        walls, traces, launches = export_profile(config, inputs, args.runs, args.compute_dtype)
        name = f"bert-keras export, {args.compute_dtype or 'float32'}"

    tokens = args.batch_size * args.seq
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    flops = {
        "dense matmuls": 2 * (4 * hidden * hidden + 2 * hidden * inter) * tokens * layers,
        "attention matmuls": 4 * args.seq * hidden * tokens * layers,
    }
    wall = statistics.median(walls)
    print(
        f"BERT-{args.preset} {name}, batch {args.batch_size} x seq {args.seq}, "
        f"{os.cpu_count()} cores, fp32 matmul peak measured {peak:.0f} GFLOP/s"
    )
    print(
        f"wall time, untraced: {wall:.1f} ms (median of {args.runs}); "
        f"{sum(flops.values()) / wall / 1e6:.0f} GFLOP/s, {sum(flops.values()) / wall / 1e6 / peak:.1%} of peak"
    )
    print(f"\n{'group':20} {'kernels':>8} {'ms (traced)':>12} {'% of wall':>10} {'GFLOP/s':>9} {'% of peak':>10}")
    total = 0.0
    for group in GROUPS:
        ms = statistics.median(trace[group] for trace in traces)
        total += ms
        rate = (
            f"{flops[group] / ms / 1e6:9.0f} {flops[group] / ms / 1e6 / peak:>10.1%}" if group in flops and ms else ""
        )
        print(f"{group:20} {launches.get(group, 0):>8} {ms:>12.1f} {ms / wall:>10.1%} {rate}")
    print(f"{'sum':20} {'':>8} {total:>12.1f}")


if __name__ == "__main__":
    main()

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
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_serving import (
    export_random_encoder,
    make_inputs,
    matmul_peak_gflops,
    onnx_feed,
    onnxruntime_session,
    scratch_dir,
)
from bench.measure import (
    Report,
    add_json_argument,
    add_peer_argument,
    answer_peer,
    machine_line,
    run_peer,
    timed_calls,
)

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


def walls_ms(run, runs):
    return [1000 * seconds for seconds in timed_calls(run, runs)]


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
    walls = walls_ms(lambda: predictor.session.run(fetch, feed), runs)
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


def onnxruntime_profile(job):
    """As `export_profile`, for ONNX Runtime (in a peer process: PyTorch, which exports the
    ONNX file, never shares a process with TensorFlow): profiled runs first, then untraced ones."""
    config, runs = job["config"], job["runs"]
    inputs = make_inputs(config, job["batch_size"], job["seq"])
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
    walls = walls_ms(lambda: session.run(["pooler_output"], feed), runs)
    return {"walls": walls, "traces": traces, "launches": {group: count // runs for group, count in launches.items()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--runtime", choices=["export", "onnxruntime"], default="export")
    parser.add_argument(
        "--compute-dtype", choices=["float32", "bfloat16"], help="of the export (default: the encoder's own, float32)"
    )
    parser.add_argument("--runs", type=int, default=5, help="untraced runs for the wall time, and as many traced runs")
    add_json_argument(parser)
    add_peer_argument(parser)
    args = parser.parse_args(argv)
    if args.peer:
        return answer_peer({"onnxruntime_profile": onnxruntime_profile})

    from bert_keras.config import BertConfig

    report = Report("profile_serving", vars(args))
    config = BertConfig.preset(args.preset).to_original_dict()
    peak = matmul_peak_gflops()
    if args.runtime == "onnxruntime":
        job = {"peer": "onnxruntime_profile", "config": config, "runs": args.runs}
        profile = run_peer(sys.executable, __file__, {**job, "batch_size": args.batch_size, "seq": args.seq})
        walls, traces, launches = profile["walls"], profile["traces"], profile["launches"]
        traces = [collections.Counter(trace) for trace in traces]
        name = "ONNX Runtime (HF model), float32"
    else:
        inputs = make_inputs(config, args.batch_size, args.seq)
        walls, traces, launches = export_profile(config, inputs, args.runs, args.compute_dtype)
        name = f"bert-keras export, {args.compute_dtype or 'float32'}"

    tokens = args.batch_size * args.seq
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    flops = {
        "dense matmuls": 2 * (4 * hidden * hidden + 2 * hidden * inter) * tokens * layers,
        "attention matmuls": 4 * args.seq * hidden * tokens * layers,
    }
    wall = report.add(f"{name}, untraced", "ms", walls)["median"]
    print(
        f"BERT-{args.preset} {name}, batch {args.batch_size} x seq {args.seq}, "
        f"fp32 matmul peak measured {peak:.0f} GFLOP/s; {machine_line(report.machine)}"
    )
    print(
        f"wall time, untraced: {wall:.1f} ms (median of {args.runs}); "
        f"{sum(flops.values()) / wall / 1e6:.0f} GFLOP/s, {sum(flops.values()) / wall / 1e6 / peak:.1%} of peak"
    )
    print(f"\n{'group':20} {'kernels':>8} {'ms (traced)':>12} {'% of wall':>10} {'GFLOP/s':>9} {'% of peak':>10}")
    total = 0.0
    for group in GROUPS:
        ms = report.add(f"{name}, {group}, traced", "ms", [trace[group] for trace in traces])["median"]
        total += ms
        rate = (
            f"{flops[group] / ms / 1e6:9.0f} {flops[group] / ms / 1e6 / peak:>10.1%}" if group in flops and ms else ""
        )
        print(f"{group:20} {launches.get(group, 0):>8} {ms:>12.1f} {ms / wall:>10.1%} {rate}")
    print(f"{'sum':20} {'':>8} {total:>12.1f}")
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

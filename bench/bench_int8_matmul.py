"""Why there is no int8 SavedModel: TensorFlow's own CPU kernels for an int8 matmul, timed
against float32 and bfloat16 at one of BERT-base's matmul shapes.

A SavedModel (and so TF Serving) can only run TensorFlow's kernels. Keras'
`model.quantize("int8")` makes `Dense`/`EinsumDense` quantize their inputs per row and run
`tf.linalg.matmul(int8, int8, output_type=int32)` (`BatchMatMulV3`); TensorFlow 1's
`QuantizedMatMul` (quint8) is the other int8 kernel TensorFlow still registers. Each is
timed with 2 intra-op threads, the rows interleaved (one call to each in turn, `--rounds`
rounds), as median and interquartile range.

    nice -n 10 python bench/bench_int8_matmul.py [--rows 128] [--rounds 30]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import Report, add_json_argument, interleaved, machine_line

THREADS = 2


def kernels(rows, inner, outer):
    """{name: tf.function} of [rows, inner] x [inner, outer] matmuls."""
    import tensorflow as tf

    generator = np.random.default_rng(0)
    a32 = tf.constant(generator.standard_normal((rows, inner), np.float32))
    b32 = tf.constant(generator.standard_normal((inner, outer), np.float32))
    b8 = tf.constant(generator.integers(-127, 128, (inner, outer), np.int8))
    a16, b16 = tf.cast(a32, tf.bfloat16), tf.cast(b32, tf.bfloat16)
    au = tf.bitcast(tf.constant(generator.integers(0, 256, (rows, inner), np.uint8)), tf.quint8)
    bu = tf.bitcast(tf.constant(generator.integers(0, 256, (inner, outer), np.uint8)), tf.quint8)
    zero, one = tf.constant(0.0), tf.constant(1.0)

    def keras_int8():
        # What Keras' int8 Dense runs on TensorFlow: per-row input scales, int8 x int8 -> int32, rescale.
        scale = 127.0 / tf.reduce_max(tf.abs(a32), axis=-1, keepdims=True)
        quantized = tf.cast(tf.clip_by_value(tf.round(a32 * scale), -127, 127), tf.int8)
        return tf.cast(tf.linalg.matmul(quantized, b8, output_type=tf.int32), tf.float32) / scale

    def quantized_matmul():
        return tf.raw_ops.QuantizedMatMul(a=au, b=bu, min_a=zero, max_a=one, min_b=zero, max_b=one, Toutput=tf.qint32)[
            0
        ]

    return {
        "float32 MatMul": tf.function(lambda: tf.matmul(a32, b32)),
        "bfloat16 MatMul": tf.function(lambda: tf.matmul(a16, b16)),
        "int8 BatchMatMulV3 (Keras int8 Dense)": tf.function(keras_int8),
        "quint8 QuantizedMatMul (TF1)": tf.function(quantized_matmul),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=128, help="tokens in the batch (one sequence of 128)")
    parser.add_argument("--rounds", type=int, default=30)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    report = Report("bench_int8_matmul", {**vars(args), "threads": THREADS, "tensorflow": tf.__version__})
    functions = kernels(args.rows, 768, 3072)
    times = interleaved({name: lambda f=function: f().numpy() for name, function in functions.items()}, args.rounds)
    stats = {name: report.add(name, "ms", seconds, scale=1000) for name, seconds in times.items()}
    baseline = stats["float32 MatMul"]["median"]
    print(f"[{args.rows}, 768] x [768, 3072], TensorFlow {tf.__version__}, {THREADS} threads, {args.rounds} rounds")
    print(machine_line(report.machine))
    print("| kernel | median ms (IQR) | x float32 |")
    print("|---|---|---|")
    for name, entry in stats.items():
        (q1, q3), median = entry["spread"], entry["median"]
        print(f"| {name} | {median:.1f} ({q1:.1f}-{q3:.1f}) | {median / baseline:.2f} |")
    if args.json:
        report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())

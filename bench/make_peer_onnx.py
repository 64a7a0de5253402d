"""Writes the ONNX Runtime peer of `bench_deploy.py --peer-onnx`: Hugging Face's
`BertForSequenceClassification` at BERT-base's size (random weights, 2 labels: latency does
not depend on the weights) exported to ONNX float32 by PyTorch's exporter, the route the
issue's ONNX Runtime figure came from.

Run outside the project's environment, in one with torch and transformers (never a
dependency of bert-keras):

    python3 -m venv /work/sidevenv && /work/sidevenv/bin/pip install torch==2.13.0
    /work/sidevenv/bin/pip install transformers onnx onnxscript
    /work/sidevenv/bin/python bench/make_peer_onnx.py /tmp/peer/bert_base.onnx
"""

import argparse
import sys
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", help="the .onnx file to write")
    args = parser.parse_args(argv)
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, num_labels=2)  # BERT-base: 12 layers, hidden 768
    model = BertForSequenceClassification(config).eval()
    ids = torch.ones(1, 16, dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        args.output,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    print(f"wrote {args.output} (transformers {__import__('transformers').__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    sys.exit(main())

"""`bert-keras serve`: TF Serving's gRPC and REST APIs on an export, without Docker.

For development and tests where `tensorflow_model_server` cannot run; in production use
TF Serving itself (see docs/serving.md). Serves the newest version under MODEL_BASE, or
the models, version policies and labels of a ModelServerConfig (`--model-config-file`, as
tensorflow_model_server's --model_config_file). Runs until interrupted. `GET /` on the
REST port is a page to try each model in a browser.
"""

import time

from bert_keras_cli.arguments import InputPath


def register(subparsers):
    parser = subparsers.add_parser("serve", help="serve an export locally with TF Serving's APIs", description=__doc__)
    parser.add_argument("model_base", nargs="?", type=InputPath, help="directory holding numbered export versions")
    parser.add_argument(
        "--model-config-file", type=InputPath, help="ModelServerConfig text file (instead of MODEL_BASE)"
    )
    parser.add_argument("--name", default="bert", help="model name in request paths (with MODEL_BASE)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=8500)
    parser.add_argument("--rest-port", type=int, default=8501)
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        help="larger requests are refused unread: HTTP 413, gRPC RESOURCE_EXHAUSTED (default 16 MiB)",
    )
    parser.add_argument(
        "--max-batch-rows",
        type=int,
        help="larger batches run in slices of this many rows, bounding memory (default 256)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        help="REST connections served at once; more wait in the listen backlog (default 512)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        help="seconds a REST request may take to arrive before it is dropped (default 30)",
    )
    parser.set_defaults(func=run)


def run(args):
    from bert_keras.serving.tfserving.local_server import LocalModelServer

    if (args.model_base is None) == (args.model_config_file is None):
        raise SystemExit("serve: give MODEL_BASE or --model-config-file (one of them)")
    limits = {
        name: getattr(args, name)
        for name in ("max_request_bytes", "max_batch_rows", "max_connections", "request_timeout")
        if getattr(args, name) is not None
    }
    server = LocalModelServer(
        args.model_base,
        args.name,
        args.host,
        args.grpc_port,
        args.rest_port,
        model_config_file=args.model_config_file,
        **limits,
    ).start()
    models = "; ".join(
        f"{name!r} versions {sorted(model.versions)}" + "".join(f", {k}={v}" for k, v in sorted(model.labels.items()))
        for name, model in server.models.items()
    )
    urls = ", ".join(f"http://{args.host}:{server.rest_port}/v1/models/{name}" for name in server.models)
    print(
        f"serving {args.model_base or args.model_config_file}: {models}; gRPC {args.host}:{server.grpc_port}, "
        f"REST {urls}; try them in a browser: http://{args.host}:{server.rest_port}/",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0

"""`bert-keras serve`: TF Serving's gRPC and REST APIs on an export, without Docker.

For development and tests where `tensorflow_model_server` cannot run; in production use
TF Serving itself (see serving/README.md). Runs until interrupted.
"""

import time


def register(subparsers):
    parser = subparsers.add_parser("serve", help="serve an export locally with TF Serving's APIs",
                                   description=__doc__)
    parser.add_argument("model_base", help="directory holding numbered export versions")
    parser.add_argument("--name", default="bert", help="model name in request paths")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=8500)
    parser.add_argument("--rest-port", type=int, default=8501)
    parser.set_defaults(func=run)


def run(args):
    from bert_keras.local_server import LocalModelServer

    server = LocalModelServer(args.model_base, args.name, args.host, args.grpc_port, args.rest_port).start()
    print(f"serving {server.version_path} as {args.name!r}: gRPC {args.host}:{server.grpc_port}, "
          f"REST http://{args.host}:{server.rest_port}/v1/models/{args.name}:predict", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0

"""`bert-keras push MODEL ORG/NAME`: publish a model on the Hugging Face Hub as a folder
that transformers' AutoModelFor*, sentence-transformers and bert-keras load.

MODEL is a Hugging Face folder (or a Hub name's snapshot), uploaded as it is, or any other
model a command loads (a `.keras` file such as a run's best.keras, a TF1 checkpoint), first
written as `convert --to hf` writes it, model card included. The repo is created when new
(`--private`), `--revision` names a branch (made when new), and the token is HF_TOKEN's
(or `hf auth login`'s).

Example: `HF_TOKEN=hf_... bert-keras push runs/sst2/best.keras acme/bert-sst2`.
"""

from bert_keras_cli.arguments import CheckpointPath


def register(subparsers):
    parser = subparsers.add_parser(
        "push",
        help="upload a model to the Hugging Face Hub with its model card",
        description=__doc__,
    )
    parser.add_argument(
        "model",
        type=CheckpointPath,
        help="a Hugging Face folder, or a .keras file, TF1 checkpoint or Hub name to convert first",
    )
    parser.add_argument("repo_id", metavar="ORG/NAME", help="the Hub model repo (created when new)")
    parser.add_argument("--revision", help="the branch to commit to (default: main; made from main when new)")
    parser.add_argument("--private", action="store_true", help="make a new repo private")
    parser.add_argument("--commit-message", help="the commit's message (default: Upload NAME with bert-keras)")
    parser.set_defaults(func=run)


def run(args):
    import tempfile
    from pathlib import Path

    from bert_keras.checkpoint.hf import HF_CONFIG, has_hf_weights
    from bert_keras.hub import upload
    from bert_keras.tasks.checkpoint_models import load_model, save_model

    source = Path(args.model)
    with tempfile.TemporaryDirectory() as scratch:
        folder = source
        if not (source.is_dir() and (source / HF_CONFIG).is_file() and has_hf_weights(source)):
            folder = Path(scratch) / args.repo_id.split("/")[-1]
            save_model(load_model(args.model), folder, "hf", source=args.model, repo_id=args.repo_id)
        url = upload(folder, args.repo_id, args.revision, args.private, args.commit_message)
        files = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
    print(f"pushed {args.model} to {args.repo_id} ({', '.join(files)}): {url}")

"""``litegpu batch``: a model over a folder of images / .npy files or a Parquet/Arrow dataset, on Ray
Data (see :mod:`litegpu.batch`; needs the ``litegpu[ray]`` extra)."""

from __future__ import annotations

import argparse

from ._common import add_backend_options, add_common_args, emit_json, out, parse_option_pairs
from ._preprocess import PreprocessOptions, add_image_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "batch", help="run a model over a folder or dataset on Ray (local or a cluster)",
        description="Run MODEL over every image, .npy file or Parquet/Arrow row under INPUT with a pool of "
                    "Ray actors (one prepared model per device) and write one row per input, with its source "
                    "path and an error column, into OUTPUT as Parquet or .npy shards.  Without --address a "
                    "local Ray instance is started; a rerun skips inputs already in OUTPUT.  Needs "
                    "pip install 'litegpu[ray]'.")
    p.add_argument("model", help=".tflite model file")
    p.add_argument("input", help="folder of images/.npy files (searched recursively), or Parquet/Arrow file(s)")
    p.add_argument("output", help="output folder (created; shards already there are kept and skipped)")
    p.add_argument("--backend", "-b", default="cpu",
                   help="backend of every actor (default: cpu; auto: measured here once; see `litegpu backends`)")
    p.add_argument("--actors", type=int, metavar="N",
                   help="model actors (default: one per GPU for a GPU backend on a cluster with GPUs, else half "
                        "the CPUs)")
    p.add_argument("--batch-size", type=int, default=32, metavar="K", help="inputs per batch and shard (default 32)")
    p.add_argument("--in-flight", type=int, metavar="N", help="submissions in flight in each GPU actor, each of up to 16 rows run as one (default 3)")
    p.add_argument("--address", metavar="ray://HOST:10001",
                   help="join this Ray cluster (or 'auto': the one this machine belongs to) instead of starting "
                        "a local instance")
    p.add_argument("--num-cpus", type=int, metavar="N", help="CPUs of the local Ray instance (default: all)")
    p.add_argument("--gpus-per-actor", type=float, metavar="G",
                   help="GPU share of each actor (default: the cluster's GPUs / --actors, at most 1)")
    p.add_argument("--format", choices=("parquet", "npy"), default="parquet", help="output shards (default parquet)")
    p.add_argument("--column", metavar="NAME", help="table input: the column of images (default: 'image', else "
                                                    "the only binary or list column)")
    p.add_argument("--id-column", metavar="NAME", help="table input: the column written as the row's source "
                                                       "(default FILE#ROW)")
    p.add_argument("--no-progress", action="store_true", help="no Ray progress bars")
    add_image_args(p)
    add_backend_options(p)
    add_common_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..batch._job import run_batch, summary_lines

    pre = PreprocessOptions.from_args(args)
    result = run_batch(args.model, args.input, args.output, backend=args.backend, config=args.config,
                       actors=args.actors, batch_size=args.batch_size, address=args.address,
                       output_format=args.format, column=args.column, id_column=args.id_column, preprocess=pre,
                       precision=args.precision, options=parse_option_pairs(args.option), num_cpus=args.num_cpus,
                       gpus_per_actor=args.gpus_per_actor, progress=not args.no_progress,
                       in_flight=args.in_flight)
    if args.json:
        emit_json(result.as_dict())
    else:
        for line in summary_lines(result):
            out(line)
    return 1 if result.failures else 0

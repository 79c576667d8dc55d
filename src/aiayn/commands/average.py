"""`aiayn average`: the mean of several checkpoints' weights, as a self-contained model directory."""

from __future__ import annotations

HELP = "average the weights of checkpoints (§6.1) into a self-contained model directory"


def add_arguments(p) -> None:
    from aiayn.commands.door import whole_number

    p.add_argument("checkpoints", nargs="+", metavar="CKPT",
                   help="checkpoint or model directories (config.json + model.safetensors), or a run's "
                        "checkpoints/ directory together with --last N")
    p.add_argument("-o", "--output", required=True, metavar="MODEL_DIR", help="where to write the model")
    p.add_argument("--last", type=whole_number(1), metavar="N", help="with one checkpoints/ directory: its newest N")
    p.add_argument("--tokenizer", metavar="DIR", help="directory with tokenizer.json to copy (default: the "
                                                      "first checkpoint's, else its run's tokenizer/ or model/)")
    p.add_argument("--task-from", metavar="MODEL_DIR", help="model directory whose task.json (the task, its "
                                                           "decoding and input settings) to copy (default: the "
                                                           "first checkpoint's, else its run's model/)")


def run(args) -> int:
    from pathlib import Path

    from aiayn.tasks import read_task_info, task_of
    from aiayn.training.average import write_average
    from aiayn.training.checkpoint import list_checkpoints

    paths = [Path(p) for p in args.checkpoints]
    for path in paths:
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no such checkpoint directory")
    if args.last is None and list_checkpoints(paths[0]):
        raise ValueError(f"{paths[0]} holds checkpoints: name them, or add --last N for its newest N")
    if args.last is not None:
        if len(paths) != 1:
            raise ValueError("--last takes exactly one checkpoints/ directory")
        found = list_checkpoints(paths[0])
        if len(found) < args.last:
            raise ValueError(f"{paths[0]} holds {len(found)} checkpoints, fewer than --last {args.last}")
        paths = found[-args.last:]
    info = read_task_info(args.task_from) if args.task_from else None
    out, tok_dir = write_average(paths, args.output, args.tokenizer, info)
    print(f"averaged {len(paths)} checkpoints: {', '.join(p.name for p in paths)}")
    print(f"model: {out} (config.json, model.safetensors, tokenizer from {tok_dir}; answers as a {task_of(out)} model)")
    return 0

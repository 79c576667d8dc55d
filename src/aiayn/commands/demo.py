HELP = "train a small Transformer on a synthetic task, offline, and decode held-out examples"


def add_arguments(p) -> None:
    from aiayn.demo import DemoConfig

    d = DemoConfig()
    p.add_argument("--task", choices=["copy", "reverse", "sort"], default=d.task)
    p.add_argument("--updates", type=int, default=d.updates)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--output", default="runs/demo", help="where the model directory is written")


def run(args) -> int:
    import dataclasses

    from pathlib import Path

    from aiayn.demo import DemoConfig, run_demo
    from aiayn.plots import save_attention_plot

    cfg = dataclasses.replace(DemoConfig(), task=args.task, updates=args.updates, seed=args.seed)
    result = run_demo(args.output, cfg)
    for src, ref, hyp in result.examples[:3]:
        print(f"  {src}  ->  {hyp}   ({'ok' if hyp == ref else 'expected ' + ref})")
    print(f"task: {cfg.task}   exact match: {result.accuracy:.1%} on {len(result.examples)} held-out examples")
    print(f"model: {result.model_dir}   time: {result.seconds:.1f} s")
    longest = max((src for src, _, _ in result.examples), key=len)
    plot = save_attention_plot(result.model_dir, longest, Path(args.output) / "attention.png")
    print(f"cross-attention of '{longest}': {plot}")
    return 0

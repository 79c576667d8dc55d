import sys

HELP = "draw pictures: attention maps, positional encodings, masks, LR schedule, training curves, scaling"

def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(p) -> None:
    from aiayn.commands import door
    from aiayn.config import DecodeConfig

    sub = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    kinds = {
        "attention": "attention heatmaps of one translation (encoder, decoder, cross; per head or all heads)",
        "positional": "the sinusoidal positional encoding (§3.5): heatmap and curves",
        "mask": "the causal mask and the padding mask of a batch",
        "schedule": "learning rate over training steps (§5.3)",
        "curves": "loss, perplexity, BLEU and LR over updates from RUN_DIR/metrics.jsonl",
        "scaling": "why dot products are scaled by 1/sqrt(d_k) (§3.2.1)",
        "complexity": "Table 1 measured: layer time against n (from benchmarks/layer_complexity.py --json)",
    }
    parsers = {name: sub.add_parser(name, help=text, description=text) for name, text in kinds.items()}
    for q in parsers.values():
        q.add_argument("--output", "-o", required=True, help="PNG file to write")
        q.add_argument("--size", help="picture size in pixels, WIDTHxHEIGHT (default: 1000x700; mask 1000x420)")
    a = parsers["attention"]
    a.add_argument("--model", required=True, help="model directory (config.json, model.safetensors, tokenizer.json)")
    which = a.add_mutually_exclusive_group(required=True)
    which.add_argument("--sentence", type=door.text_argument, help="source sentence to translate (greedy) and draw")
    which.add_argument("--image", type=int, help="for a ViT: the index of a held-out digit; "
                                                 "draws [CLS]'s attention to each patch, per layer (or per head of --layer)")
    a.add_argument("--part", choices=("cross", "encoder", "decoder", "all"),
                   help="which attention: encoder self, decoder masked self, cross, or all (default: cross; for a "
                        "decoder-only or encoder-only model its self-attention over the sentence, nothing generated)")
    a.add_argument("--layer", type=int, help="layer index from 0 (default: the last layer)")
    a.add_argument("--head", type=int, help="one head (default: a grid of all heads)")
    door.add_device_argument(a)
    a.add_argument("--max-len-b", type=int, help=f"at most |source| + B output tokens (default: the model directory's task.json, else {DecodeConfig().max_len_b}, §6.1)")
    q = parsers["positional"]
    q.add_argument("--length", type=int, help="positions to draw (default 100)")
    q.add_argument("--d-model", type=int, help="encoding size (default: the paper's d_model)")
    q.add_argument("--dims", type=_int_list, help="dimensions for the curves (default 4,5,6,7)")
    m = parsers["mask"]
    m.add_argument("--lengths", type=_int_list, help="source lengths of the batch (default 5,3,7)")
    m.add_argument("--tgt-len", type=int, help="target length for the causal mask (default 6)")
    s = parsers["schedule"]
    s.add_argument("--config", help="training config (TOML in recipes/); its d_model/warmup/factor are used")
    s.add_argument("--d-model", type=int, help="d_model (default: config or paper)")
    s.add_argument("--warmup", type=int, help="warmup steps (default: config or paper)")
    s.add_argument("--factor", type=float, help="LR factor (default: config or paper)")
    s.add_argument("--steps", type=int, help="steps to draw (default: the config's max_updates, else 25 x warmup)")
    s.add_argument("--schedule", action="append",
                   help="schedule name(s) to draw, one panel each (default: the config's, else noam)")
    s.add_argument("--no-compare", action="store_true", help="omit the curves at other warmups/d_model")
    c = parsers["curves"]
    c.add_argument("run", help="run directory holding metrics.jsonl (or the file itself)")
    parsers["complexity"].add_argument("results", help="a file holding the --json output of "
                                                       "benchmarks/layer_complexity.py (its last line)")
    sc = parsers["scaling"]
    sc.add_argument("--max-dk", type=int, help="largest d_k (powers of two from 1; default 1024)")
    sc.add_argument("--seed", type=int, help="seed of the random queries and keys (default 0)")


def _schedule_settings(args) -> dict:
    """d_model / warmup / factor from --config, overridden by explicit flags."""
    values = {"d_model": None, "warmup": None, "factor": None, "schedule": None, "steps": None}
    if args.config:
        from aiayn.training.config import load_config

        cfg = load_config(args.config)
        d_model = cfg.model.build(64, 64).width
        values = {"d_model": d_model, "warmup": cfg.optim.warmup_steps, "factor": cfg.optim.lr_factor,
                  "schedule": [cfg.train.schedule], "steps": cfg.train.max_updates or None}
    for key in values:
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    return values


def _given(args, **params: str) -> dict:
    """{parameter: args.<flag>} for the flags given on the command line; the plot function's own
    defaults hold for the others (the help texts name them; tests/plots checks they agree)."""
    return {param: getattr(args, flag) for param, flag in params.items() if getattr(args, flag) is not None}


def _figure(args, size: dict):
    """Draw the figure of args.kind; `size` is {} (each plot's default) or {"size": (w, h)}."""
    from aiayn import plots

    if args.kind == "attention":
        return _attention(args, size)
    if args.kind == "positional":
        return plots.plot_positional(**_given(args, length="length", d_model="d_model", dims="dims"), **size)
    if args.kind == "mask":
        return plots.plot_masks(**_given(args, lengths="lengths", tgt_len="tgt_len"), **size)
    if args.kind == "schedule":
        s = _schedule_settings(args)
        return plots.plot_schedule(s["d_model"], s["warmup"], s["factor"], s["steps"], s["schedule"],
                                   compare=not args.no_compare, **size)
    if args.kind == "curves":
        return plots.plot_curves(args.run, **size)
    if args.kind == "complexity":
        return plots.plot_complexity(args.results, **size)
    return plots.plot_scaling(**_scaling_dims(args.max_dk), **_given(args, seed="seed"), **size)


def _attention(args, size: dict):
    """Through the model's pipeline: its input is cut as every door cuts it; `--image` (a test image's
    index) for a pipeline that reads images, `--sentence` (a line of its CLI line format) for one that
    reads text."""
    from aiayn.commands.door import load
    from aiayn.commands.lines import line_format
    from aiayn.config import DecodeConfig
    from aiayn.plots.attention import draw  # matplotlib's import: only for a plot

    if args.max_len_b is not None:
        DecodeConfig(max_len_b=args.max_len_b)  # refused as `aiayn translate --max-len-b` refuses it
    image = args.image is not None
    pipeline = load(args)
    if pipeline.reads_images != image:
        if image:
            raise ValueError(f"--image {args.image}: {args.model} reads text, not images; give --sentence TEXT")
        raise ValueError(f"--sentence {args.sentence!r}: {args.model} reads images, not text; "
                         "give --image N (the number of a test image)")
    given = args.image if image else line_format(pipeline).parse(args.sentence)
    maps = pipeline.attention(given, max_len_b=args.max_len_b)
    print(maps.describe(), file=_notes(args))
    return draw(maps, args.part, args.layer, args.head, **size)


def _scaling_dims(max_dk: int | None) -> dict:
    """{"dims": the powers of two up to --max-dk}, or {} without the flag (the plot's own)."""
    from aiayn.plots.scaling import MAX_DK

    if max_dk is None:
        return {}
    if not 1 <= max_dk <= MAX_DK:
        raise ValueError(f"--max-dk must be from 1 to {MAX_DK}, got {max_dk}")
    return {"dims": [2**i for i in range(max_dk.bit_length())]}


def run(args) -> int:
    from aiayn.plots._figure import parse_size, save_png

    fig, _ = _figure(args, {} if args.size is None else {"size": parse_size(args.size)})
    print(f"wrote {save_png(fig, args.output)}", file=_notes(args))
    return 0


def _notes(args):
    """Where the command's own lines go: stdout, or stderr when stdout carries the picture (-o -)."""
    return sys.stderr if args.output == "-" else sys.stdout

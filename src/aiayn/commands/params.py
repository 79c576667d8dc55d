HELP = "print parameter counts of the presets (measured and analytic)"


def add_arguments(p) -> None:
    from aiayn.config import TransformerConfig

    p.add_argument("--vocab", type=int, default=TransformerConfig.src_vocab_size,
                   help=f"joint vocabulary size (default: {TransformerConfig.src_vocab_size:,}, the config's, as in §5.1)")
    p.add_argument("--preset", action="append", help="preset(s) to show (default: all)")


def run(args) -> int:
    import torch

    from aiayn.config import PRESETS, TransformerConfig
    from aiayn.models import Transformer, count_parameters

    print(f"{'preset':<8}{'d_model':>8}{'heads':>6}{'layers':>8}{'d_ff':>6} {'parameters':>14} {'analytic':>14}")
    for name in args.preset or list(PRESETS):
        cfg = TransformerConfig.preset(name, src_vocab_size=args.vocab)
        with torch.device("meta"):  # counted without the memory: any --vocab, at once
            n = Transformer(cfg).num_parameters()
        layers = f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers}"
        print(f"{name:<8}{cfg.d_model:>8}{cfg.n_heads:>6}{layers:>8}{cfg.d_ff:>6} {n:>14,} {count_parameters(cfg):>14,}")  # spaces: wide counts stay apart
    print(f"(shared {args.vocab:,}-token vocabulary; tied embeddings and pre-softmax projection, §3.4)")
    print()
    print(f"{'recipe':<22}{'model_type':<17}{'d_model':>8}{'layers':>8}{'vocabulary':>12}{'parameters':>14}")
    for recipe, vocab, extra in FAMILY:
        model_type, n, width, layers = _recipe_model(recipe, vocab or 1, extra)
        shown = f"{vocab:,}" if vocab else "patches"
        print(f"{recipe:<22}{model_type:<17}{width:>8}{layers:>8}{shown:>12}{n:>14,}")
    print("(the family as the shipped recipes build it; vocabulary sizes as their data give them)")
    return 0


# recipe, vocabulary size its data gives (0: none, the input is patches), fields the task sets (classes, patches)
FAMILY = (
    ("multi30k-de-en", 8000, {}),
    ("multi30k-de-en-rnn", 8000, {}),
    ("shakespeare-char", 69, {}),  # 65 characters + 4 special ids
    ("sst2-classify", 8000, {"n_classes": 2}),
    ("vit-digits", 0, {"n_classes": 10, "input": "patches", "patch_dim": 4}),
)


def _recipe_model(name: str, vocab: int, extra: dict) -> tuple[str, int, int, str]:
    """(model_type, parameters, width, layers) of a shipped recipe's model."""
    from aiayn.commands.demo import RECIPE
    from aiayn.models import build_model
    from aiayn.training.config import load_config

    spec = load_config(RECIPE.parent / f"{name}.toml").model
    config = spec.build(vocab, vocab, **extra)
    model = build_model(spec.type, config)
    return spec.type, model.num_parameters(), config.width, config.depth

HELP = "print parameter counts of the presets (measured and analytic)"


def add_arguments(p) -> None:
    from aiayn.config import TransformerConfig

    p.add_argument("--vocab", type=int, default=TransformerConfig.src_vocab_size,
                   help=f"joint vocabulary size (default: {TransformerConfig.src_vocab_size:,}, the config's, as in §5.1)")
    p.add_argument("--preset", action="append", help="preset(s) to show (default: all)")


def run(args) -> int:
    from aiayn.config import PRESETS, TransformerConfig
    from aiayn.models import Transformer, count_parameters

    print(f"{'preset':<8}{'d_model':>8}{'heads':>6}{'layers':>8}{'d_ff':>6}{'parameters':>14}{'analytic':>14}")
    for name in args.preset or list(PRESETS):
        cfg = TransformerConfig.preset(name, src_vocab_size=args.vocab)
        n = Transformer(cfg).num_parameters()
        layers = f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers}"
        print(f"{name:<8}{cfg.d_model:>8}{cfg.n_heads:>6}{layers:>8}{cfg.d_ff:>6}{n:>14,}{count_parameters(cfg):>14,}")
    print(f"(shared {args.vocab:,}-token vocabulary; tied embeddings and pre-softmax projection, §3.4)")
    return 0

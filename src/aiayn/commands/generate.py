"""`aiayn generate`: continue a prompt with a decoder-only language model (GPT)."""

from __future__ import annotations

from aiayn.commands import door
from aiayn.config import SamplingConfig

HELP = "sample text from a language model directory (task lm) after a prompt"

_S = SamplingConfig()


def add_arguments(p) -> None:
    door.add_model_argument(p, "model directory written by `aiayn train` (task lm)")
    p.add_argument("--prompt", default="\n", type=door.text_argument, help="text to continue (default: a new line)")
    p.add_argument("--max-new-tokens", type=int, help="tokens to generate (default: the pipeline's, 200)")
    p.add_argument("--method", choices=["sample", "greedy"], help="(default: the pipeline's, sample)")
    p.add_argument("--temperature", type=float, help=f"sampling temperature (default: {_S.temperature})")
    p.add_argument("--top-k", type=int, help=f"sample from the k most probable tokens (default: {_S.top_k}, all)")
    p.add_argument("--top-p", type=float, help=f"nucleus sampling mass (default: {_S.top_p}, all)")
    p.add_argument("--seed", type=int, help="sampling seed (default: unseeded)")
    door.add_device_argument(p)


def run(args) -> int:
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    pipeline = door.load(args, own_command=True)
    given = {"max_new_tokens": args.max_new_tokens, "method": args.method}  # unset: the pipeline's defaults
    text = pipeline([args.prompt], **{k: v for k, v in given.items() if v is not None}, seed=args.seed,
                    temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)[0]
    print(args.prompt + text)
    return 0

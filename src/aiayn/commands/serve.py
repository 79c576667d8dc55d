"""`aiayn serve MODEL_DIR [MODEL_DIR ...]` (or --model MODEL_DIR, repeated): the models behind HTTP, batched
across requests, with a web page at /."""

from __future__ import annotations

from aiayn.commands import door
from aiayn.commands.door import add_model_dirs_argument, whole_number
from aiayn.commands.translate import add_precision_arguments
from aiayn.serve.app import ServeLimits
from aiayn.serve.batcher import BatchConfig

HELP = "serve model directories over HTTP (LibreTranslate-compatible /translate, /v1/..., a web page at /)"

_B, _L = BatchConfig(), ServeLimits()


def add_arguments(p) -> None:
    add_model_dirs_argument(p, "model directories written by `aiayn train` (any task with an inference door), "
                               "or with --backend ctranslate2 ones written by `aiayn export ctranslate2`; translation "
                               "models of different language pairs share /translate, routed by source and target")
    p.add_argument("--backend", choices=("native", "ctranslate2"), default="native",
                   help="decode with aiayn itself (native, the default) or with CTranslate2 (ctranslate2: "
                        "an export directory; no attention weights)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: 127.0.0.1, this machine only; another without --api-key warns)")
    p.add_argument("--port", type=whole_number(0, 65535), default=8000, help="0: any free port (default: 8000)")
    p.add_argument("--api-key", default=_L.api_key, help="require this api_key (default: none; a sent key is ignored)")
    p.add_argument("--api-keys", metavar="FILE", default=None,
                   help="require one of the keys of this JSON file, each with its requests and characters per "
                        'minute, e.g. {"KEY": {"requests_per_minute": 60, "chars_per_minute": 20000}}; over -> 429')
    p.add_argument("--max-batch", type=int, default=_B.max_batch, help=f"texts decoded together: in flight at once in continuous beam search, per call otherwise; "
                        f"1 turns batching off (default: {_B.max_batch})")
    p.add_argument("--max-wait-ms", type=float, default=_B.max_wait_ms,
                   help=f"whole-call batching (greedy, sampling, attention, ctranslate2): how long a request waits "
                        f"for others to batch with (default: {_B.max_wait_ms:g})")
    p.add_argument("--max-queue", type=int, default=_B.max_queue,
                   help=f"waiting requests before answering 503 (default: {_B.max_queue})")
    p.add_argument("--timeout", type=float, default=_B.timeout_s, help=f"seconds per request (default: {_B.timeout_s:g})")
    p.add_argument("--max-chars", type=int, default=_L.max_chars, help=f"characters per text (default: {_L.max_chars})")
    p.add_argument("--keep-alive", type=float, default=_L.keep_alive_s,
                   help=f"seconds an idle connection stays open; keep it longer than --timeout (default: {_L.keep_alive_s:g})")
    p.add_argument("--receive-timeout", type=float, default=_L.receive_timeout_s,
                   help=f"seconds a client has to send a whole request; a connection still sending then is closed "
                        f"(default: {_L.receive_timeout_s:g})")
    p.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                   help="a web page's origin (https://example.org) that may call the API from a browser, repeatable; "
                        "* for any (default: none, as the same-origin page at / needs none)")
    p.add_argument("--worker", choices=("process", "thread"), default=_B.worker,
                   help=f"where the model decodes: a worker process of its own (restarted if it dies) or a thread of "
                        f"the HTTP process (default: {_B.worker})")
    door.add_device_argument(p)
    add_precision_arguments(p)


def run(args) -> int:
    import importlib.util

    if not args.model:
        raise ValueError("no model directory: aiayn serve MODEL [MODEL ...] (or --model MODEL, repeated)")
    if not all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn")):
        from aiayn.runtime import MissingExtra

        raise MissingExtra("aiayn serve needs the serve extra: pip install 'aiayn[serve]'")
    from aiayn.runtime import flush_denormals
    from aiayn.serve.app import serve
    from aiayn.serve.keys import read_api_keys

    flush_denormals()  # before torch's first parallel op: see its docstring

    batching = BatchConfig(args.max_batch, args.max_wait_ms, args.max_queue, args.timeout, args.worker)
    keys = tuple(read_api_keys(args.api_keys).items()) if args.api_keys else ()
    limits = ServeLimits(max_chars=args.max_chars, api_key=args.api_key, api_keys=keys, keep_alive_s=args.keep_alive,
                         receive_timeout_s=args.receive_timeout, cors_origins=tuple(args.cors_origin or ()))
    options = {k: v for k, v in (("precision", args.precision), ("quantize", args.quantize)) if v is not None}
    device = str(door.device(args, args.quantize))
    serve(args.model, args.host, args.port, device, batching, limits, args.backend, options)
    return 0

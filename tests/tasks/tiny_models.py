"""One tiny random model directory per task, as `aiayn train` would leave it (config, weights,
tokenizer, task.json): small enough to build and answer in well under a second. Shared by the
tests of the doors (CLI, Python, HTTP) and of serving."""

import contextlib
import dataclasses

import torch

from aiayn.config import DecodeConfig, TransformerConfig
from aiayn.data.synthetic import symbols
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.models import build_model
from aiayn.models.decoder_only import DecoderOnlyConfig
from aiayn.models.encoder_only import EncoderOnlyConfig
from aiayn.model_dir import write_task_info

WORDS = symbols(12) + ["[SEP]"]
GREEDY = dataclasses.asdict(DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=5))
TASKS = ("translation", "summarization", "qa", "lm", "classify", "embed", "image-classify")
IMAGE_SIDE = 4  # image-classify: 4x4 pixels in 2x2 patches


def tiny_model(directory, task: str, block: int = 16, tokenizer=None, **info):
    """A random model of `task` in `directory`; `info` adds to (or replaces) its task.json, `block` is a
    language model's context, `tokenizer` the vocabulary of a text model (default: WORDS as symbols)."""
    torch.manual_seed(0)
    tokenizer = tokenizer or SymbolTokenizer(WORDS)
    small = dict(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    defaults = {"task": task}
    if task == "lm":
        model_type, config = "decoder-only", DecoderOnlyConfig(**small, max_positions=block)
        defaults["block"] = block
    elif task == "classify":
        model_type, config = "encoder-only", EncoderOnlyConfig(**small, n_classes=2)
        defaults.update(labels=["neg", "pos"], max_input_tokens=8)
    elif task == "embed":
        model_type, config = "encoder-only", EncoderOnlyConfig(**small)
        defaults.update(labels=[], max_input_tokens=8, pooling="mean")
    elif task == "image-classify":
        n = (IMAGE_SIDE // 2) ** 2
        model_type = "encoder-only"
        config = EncoderOnlyConfig(**{**small, "vocab_size": 1}, n_classes=2, input="patches", patch_dim=4,
                                   max_positions=n + 1)
        defaults.update(labels=["dark", "light"], patch_size=2)
    else:
        model_type, config = "encoder-decoder", TransformerConfig.preset("tiny", src_vocab_size=tokenizer.vocab_size)
        defaults["decode"] = GREEDY
        if task == "translation":
            defaults["languages"] = ["de", "en"]
    build_model(model_type, config).save_pretrained(directory)
    if task != "image-classify":
        save_tokenizers(TokenizerPair.shared(tokenizer), directory)
    write_task_info(directory, {**defaults, **info})
    return directory


@contextlib.contextmanager
def task_clients(task_dirs: dict, raise_server_exceptions: bool = True, **create):
    """task -> an open FastAPI TestClient of `aiayn serve`'s app on that task's directory (`create`:
    `create_app` keywords, e.g. limits); all are closed on exit."""
    from fastapi.testclient import TestClient

    from aiayn.serve.app import create_app

    with contextlib.ExitStack() as stack:
        yield {task: stack.enter_context(TestClient(create_app(directory, **create),
                                                    raise_server_exceptions=raise_server_exceptions))
               for task, directory in task_dirs.items()}

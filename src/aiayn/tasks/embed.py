"""Feature extraction with the encoder-only model: a text's hidden states, or one vector per text.

An encoder without a head, a pretrained BERT body imported from Hugging Face (`BertModel`, a
sentence-transformers model such as all-MiniLM-L6-v2) or one trained here by masked-language
modelling (`task = "embed"` trains as `aiayn.tasks.mlm` does), answers with its final states:

    pooling = "mean"   the mean of the states over every real position, [CLS] and [SEP] included
                       (sentence-transformers' `pooling_mode_mean_tokens`, which averages under
                       the attention mask)
              "cls"    the [CLS] state
              "none"   the states themselves: (tokens, d_model) per text, [CLS] first and [SEP]
                       last, as `transformers`' BertModel gives `last_hidden_state`
    normalize          unit length (sentence-transformers' Normalize module), for pooled vectors

The defaults come from task.json (`pooling`, `normalize`), which an import fills from the
checkpoint's sentence-transformers files (`pooling_of`); without them, "cls" and not normalized.

    Embedder.from_pretrained(DIR).embed(texts)   -> one float32 array per text
    aiayn embed MODEL                            -> one JSON array per line
    POST /v1/embed                               -> OpenAI's embeddings response shape (`aiayn.serve.routes.embed`)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from aiayn.config import PAD_ID, check_choice
from aiayn.data.tokenizer import load_tokenizers
from aiayn.decoding.common import pad_sources
from aiayn.io import read_json_object
from aiayn.model_dir import TASK_FILE, read_task_info
from aiayn.models import load_model
from aiayn.models.encoder_only import EncoderOnly
from aiayn.tasks.classify import input_limit, text_inputs
from aiayn.tasks.mlm import MLMTask
from aiayn.tasks.pipeline import Pipeline

POOLINGS = ("mean", "cls", "none")
DEFAULT_POOLING = "cls"  # BERT's sentence summary; a sentence-transformers import says "mean" in task.json


def pooling_of(directory: str | Path) -> dict:
    """{"pooling", "normalize"} as a sentence-transformers model directory's own files say (modules.json,
    1_Pooling/config.json), for its task.json; {} for a plain Hugging Face directory."""
    directory = Path(directory)
    config = directory / "1_Pooling" / "config.json"
    if not config.is_file():
        return {}
    settings = read_json_object(config)
    pooling = "mean" if settings.get("pooling_mode_mean_tokens") else "cls" if settings.get("pooling_mode_cls_token") else None
    if pooling is None:
        return {}
    modules = directory / "modules.json"  # a list of {"type": "sentence_transformers.models.Normalize", ...}
    try:
        listed = json.loads(modules.read_text(encoding="utf-8")) if modules.is_file() else []
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{modules}: not JSON ({e})") from None
    normalize = isinstance(listed, list) and any(isinstance(m, dict) and str(m.get("type", "")).endswith(".Normalize")
                                                 for m in listed)
    return {"pooling": pooling, "normalize": normalize}


def pool(states: torch.Tensor, real: torch.Tensor, pooling: str) -> list[np.ndarray]:
    """(B, 1 + T, D) final states and (B, 1 + T) real positions -> one array per text: (D,) pooled, or
    (tokens, D) with pooling "none"."""
    if pooling == "none":
        return [s[r].float().numpy() for s, r in zip(states, real)]
    if pooling == "cls":
        return list(states[:, 0].float().numpy())
    weights = real.to(states.dtype)[:, :, None]  # (B, 1 + T, 1)
    return list(((states * weights).sum(1) / weights.sum(1)).float().numpy())


class Embedder(Pipeline):
    """`Embedder.from_pretrained(DIR).embed(texts)` (or `load_pipeline(DIR)(texts)`) -> one float32
    array per text."""

    task, command = "embed", "embed"
    routes = "aiayn.serve.routes.embed:ROUTES"
    lines = "aiayn.commands.lines:VECTORS"
    load_options = ("max_input_tokens",)
    model_types = (EncoderOnly.model_type,)

    def __init__(self, model, tokenizer, max_length: int, pooling: str = DEFAULT_POOLING, normalize: bool = False):
        check_choice("pooling", pooling, POOLINGS)
        self.model, self.tokenizer, self.max_length = model.eval(), tokenizer, max_length
        self.pooling, self.normalize = pooling, normalize

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu",
                        max_input_tokens: int | None = None) -> "Embedder":
        info = read_task_info(model_dir, expect=cls.task)
        pooling, normalize = info.get("pooling", DEFAULT_POOLING), info.get("normalize", False)
        if pooling not in POOLINGS or not isinstance(normalize, bool):
            raise ValueError(f"{Path(model_dir) / TASK_FILE}: pooling must be one of {', '.join(POOLINGS)} and "
                             f"normalize true or false, got {pooling!r} and {normalize!r}")
        model = load_model(model_dir, device=device)
        limit = input_limit(info, model_dir, model.config.max_positions) if max_input_tokens is None else max_input_tokens
        return cls(model, load_tokenizers(model_dir).src, limit, pooling, normalize)

    def prepare(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts -> the token ids the encoder reads (cut to `max_length`; [CLS] is the model's own)."""
        return text_inputs(self.tokenizer, texts, self.max_length)

    def run(self, inputs: list[list[int]], progress=None, batch_size: int = 64, pooling: Optional[str] = None,
            normalize: Optional[bool] = None) -> list[np.ndarray]:
        """One vector (or token-vector array) per prepared input."""
        pooling = self.pooling if pooling is None else pooling
        normalize = self.normalize if normalize is None else normalize
        check_choice("pooling", pooling, POOLINGS)
        vectors = self.states(inputs, pooling, progress, batch_size)
        if normalize and pooling != "none":
            vectors = [v / max(float(np.linalg.norm(v)), 1e-12) for v in vectors]
        return vectors

    @torch.inference_mode()
    def states(self, inputs: list[list[int]], pooling: str, progress=None, batch_size: int = 64) -> list[np.ndarray]:
        """The pooled final states of token-id inputs, `batch_size` at a time."""
        device = next(self.model.parameters()).device
        out: list[np.ndarray] = []
        for start in range(0, len(inputs), batch_size):
            tokens = pad_sources(inputs[start:start + batch_size], PAD_ID, device)  # (B, T)
            real = torch.cat([torch.ones_like(tokens[:, :1], dtype=torch.bool), tokens != PAD_ID], dim=1)  # (B, 1 + T)
            out += pool(self.model(tokens).cpu(), real.cpu(), pooling)
            if progress is not None:
                progress(len(tokens))
        return out

    def embed(self, texts: Sequence[str], pooling: Optional[str] = None, normalize: Optional[bool] = None,
              batch_size: int = 64) -> list[np.ndarray]:
        return self.run(self.prepare(texts), batch_size=batch_size, pooling=pooling, normalize=normalize)


class EmbedTask(MLMTask):
    """An encoder trained by masked-language modelling (as `MLMTask`) whose model answers with its hidden
    states (`Embedder`); what `aiayn import hf` makes of a bare BERT body."""

    name = "embed"
    pipeline = Embedder

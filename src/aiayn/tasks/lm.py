"""Language modelling (seed 004 §11, GPT): a decoder-only model learns next-token prediction.

    data        one plain-text file (`data.corpus`, `.gz` allowed); the first 1 - `data.valid_fraction`
                of its characters train, the rest validate (nanoGPT's 90/10 split by default)
    vocabulary  `data.vocab_type = "chars"`: one id per character of the training text (nanoGPT's
                shakespeare_char); or sentencepiece ("bpe"/"unigram") trained on the training lines
    batches     contiguous blocks, as nanoGPT samples them: `data.max_tokens // block` rows per
                micro-batch, each a random window of block + 1 tokens (input = the first block,
                target = shifted by one); block = the model's `max_positions`. The windows of an
                epoch (train tokens / (rows · block) batches) are drawn from (seed, epoch, rank),
                so a resumed run sees the same data.
    loss        cross-entropy over every position (label smoothing `optim.label_smoothing`)
    validation  the loss on every non-overlapping block of the validation text, in order
    inference   `Generator`: `aiayn generate`, POST /v1/generate
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch

from aiayn.config import PAD_ID, UNK_ID, SamplingConfig, check_choice, check_sampling_use
from aiayn.data.batching import LazyBatches
from aiayn.data.corpus import read_text_file
from aiayn.data.tokenizer import CharTokenizer, SentencePieceTokenizer, TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.decoding.attention_maps import self_attention_maps
from aiayn.decoding.streaming import pick_greedy, pick_sample, stream_tokens, text_pieces
from aiayn.distributed import DistInfo
from aiayn.model_dir import read_task_info, write_task_info
from aiayn.models import load_model
from aiayn.models.decoder_only import DecoderOnly
from aiayn.tasks.base import run_tokenizers
from aiayn.tasks.loss import LossSums, label_smoothed_loss
from aiayn.tasks.pipeline import Pipeline, RequestError
from aiayn.tasks.settings import VocabSettings, check, check_fraction

if TYPE_CHECKING:  # annotations only: training builds tasks
    from aiayn.training.config import TrainConfig

log = logging.getLogger(__name__)
JOIN_CONTEXT = 8  # prompt tokens a continuation is decoded after (`Generator._continuation`)


@dataclass(frozen=True)
class LMData(VocabSettings):
    renamed: ClassVar[Mapping[str, Optional[str]]] = MappingProxyType({"format": None})  # it was "text"
    vocab_types: ClassVar[tuple[str, ...]] = ("bpe", "unigram", "chars")  # running text: no whitespace symbols
    valid_fraction: float = 0.1  # the last tenth of the characters validates (nanoGPT's prepare.py)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fraction("valid_fraction", self.valid_fraction)
        check(self.valid_fraction > 0, "data.valid_fraction must be above 0: the language model validates on "
                                       "the end of the text it holds out")


@dataclass
class Blocks:
    """x: (B, T) input tokens; y: (B, T) the next token at each position."""

    x: torch.Tensor
    y: torch.Tensor

    def to(self, device) -> "Blocks":
        return Blocks(self.x.to(device), self.y.to(device))


def blocks(ids: np.ndarray, starts: np.ndarray, block: int) -> LazyBatches:
    """Batches of windows cut on access: batch i holds the windows of block + 1 tokens at starts[i]."""

    def make(i: int) -> Blocks:
        windows = np.stack([ids[s:s + block + 1] for s in starts[i]]).astype(np.int64)  # (rows, block + 1)
        return Blocks(torch.from_numpy(windows[:, :-1]), torch.from_numpy(windows[:, 1:]))
    return LazyBatches(len(starts), make)


def split_text(text: str, valid_fraction: float) -> tuple[str, str]:
    """(train, valid): the first 1 - valid_fraction of the characters, and the rest."""
    cut = int(len(text) * (1.0 - valid_fraction))
    return text[:cut], text[cut:]


@dataclass(frozen=True)
class GenerateOptions:
    """The options of `aiayn generate` and their defaults (/v1/generate's too: `aiayn.serve.routes.generate`)."""

    prompt: str = "\n"
    max_new_tokens: int = 200
    method: str = "sample"
    temperature: Optional[float] = None
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    seed: Optional[int] = None


def never_unknown(pick, device):
    """`pick` that never picks <unk>: it stands for text outside the vocabulary, which a generated text cannot
    hold (it came out as a literal "<unk>"; `transformers` drops it from the text as a special token)."""
    unknown = torch.tensor([UNK_ID], device=device)  # once, not at every token

    def picked(scores: torch.Tensor) -> int:
        return pick(scores.index_fill(-1, unknown, float("-inf")))
    return picked


class Generator(Pipeline):
    """`Generator.from_pretrained(DIR).generate(prompt, max_new_tokens=..., temperature=..., top_k=..., top_p=...)`:
    text sampled from a decoder-only model through the shared sampling code (greedy with
    `method="greedy"`). As a pipeline, an input is a prompt and an output its continuation.

    Text longer than the model's block (learned positions) is generated in windows, with the
    key/value cache inside each: when the block is full, the last half of it becomes the prompt
    of the next window. Every token thus sees between half a block and a block of context, where
    nanoGPT's `generate` re-runs the last full block for every token, without a cache. A prompt
    longer than the block keeps its last half block, with a warning."""

    task, command = "lm", "generate"
    model_types = (DecoderOnly.model_type,)
    routes = "aiayn.serve.routes.generate:ROUTES"

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model.eval(), tokenizer

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu", **options) -> "Generator":
        read_task_info(model_dir, expect=cls.task)
        return cls(load_model(model_dir, device=device), load_tokenizers(model_dir).src)

    def prepare(self, prompts: Sequence) -> list[str]:
        """Prompts as `run` reads them: a missing one (None) is `GenerateOptions.prompt`, a text's start."""
        return [GenerateOptions.prompt if prompt is None else prompt for prompt in prompts]

    def run(self, prompts: list, progress=None, **options) -> list[str]:
        out = []
        for prompt in prompts:
            out.append(self.generate(prompt, **options))
            if progress is not None:
                progress(1)
        return out

    def generate(self, prompt: str, max_new_tokens: int = GenerateOptions.max_new_tokens,
                 method: str = GenerateOptions.method, seed: int | None = None,
                 **sampling) -> str:
        """The prompt's continuation (without the prompt). `sampling`: temperature, top_k, top_p."""
        tokens, decode = self._generation(prompt, max_new_tokens, method, seed, **sampling)
        return decode(list(tokens))

    def stream(self, prompt: str, max_new_tokens: int = GenerateOptions.max_new_tokens,
               method: str = GenerateOptions.method, seed: int | None = None,
               **sampling) -> Iterator[str]:
        """`generate`'s text in pieces, as it is generated; joined, they are what `generate` returns."""
        return text_pieces(*self._generation(prompt, max_new_tokens, method, seed, **sampling))

    def _generation(self, prompt: str, max_new_tokens: int, method: str, seed: int | None,
                    **sampling) -> tuple[Iterator[int], Callable[[list[int]], str]]:
        """(the continuation's ids as they come, their decoder as the text after the prompt): the
        settings and the prompt checked, the prompt encoded once."""
        pick = self.sampler(max_new_tokens, method, seed, **sampling)
        ids = self.prompt_ids(prompt)
        return self._tokens(ids, max_new_tokens, pick), self._continuation(ids)

    def _continuation(self, prompt_ids: list[int]) -> Callable[[list[int]], str]:
        """decode(continuation ids) as the text that follows the prompt: decoded after the prompt's last
        tokens and cut after them, so that a sentencepiece word start ("▁park") keeps the space that
        decoding it alone drops ("hello" + "park")."""
        head = prompt_ids[-JOIN_CONTEXT:]
        before = self.tokenizer.decode(head)

        def decode(ids: list[int]) -> str:
            text = self.tokenizer.decode(head + list(ids))
            return text[len(before):] if text.startswith(before) else self.tokenizer.decode(list(ids))

        return decode

    def sampler(self, max_new_tokens: int = GenerateOptions.max_new_tokens,
                method: str = GenerateOptions.method, seed: int | None = None, **sampling):
        """The next-token picker for these settings; a ValueError names a bad one. `tokens` calls it before
        its first token, and the HTTP route before a stream starts."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        check_choice("method", method, ("sample", "greedy"))
        check_sampling_use(method, [k for k, v in sampling.items() if v is not None])  # as Translator.settings
        config = SamplingConfig(seed=seed, **{k: v for k, v in sampling.items() if v is not None})
        device = next(self.model.parameters()).device
        if method == "greedy":
            return never_unknown(pick_greedy, device)
        generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
        return never_unknown(pick_sample(config, generator), device)

    def tokens(self, prompt: str, max_new_tokens: int = GenerateOptions.max_new_tokens,
               method: str = GenerateOptions.method, seed: int | None = None,
               **sampling) -> Iterator[int]:
        """The ids of the prompt's continuation, one at a time, window after window (see the class).
        The settings and the prompt are checked here, before the first id is asked for."""
        return self._generation(prompt, max_new_tokens, method, seed, **sampling)[0]

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's ids, verbatim, white space included: a language model trained on running text
        continues a prompt's trailing space (the other tasks' inputs are stripped, as their training lines
        were: input_tokens). An empty prompt starts from a new line, where the vocabulary has one."""
        ids = self.tokenizer.encode(prompt) or self.tokenizer.encode("\n")[:1]
        if not ids:
            raise RequestError("the prompt is empty, and this model's vocabulary has no new line to start from: "
                               "give a prompt")
        unknown = ids.count(UNK_ID)
        if unknown:
            log.warning("%d of the prompt's %d tokens are not in the model's vocabulary: read as <unk>", unknown, len(ids))
        return ids

    def _tokens(self, ids: list[int], max_new_tokens: int, pick) -> Iterator[int]:
        device = next(self.model.parameters()).device
        block = self.model.config.max_positions if self.model.max_output_length is not None else None
        if block is not None and len(ids) >= block:
            log.warning("a prompt of %d tokens: the first %d dropped (the model's block is %d tokens; the last "
                        "%d are kept)", len(ids), len(ids) - block // 2, block, block // 2)
        out: list[int] = []
        while len(out) < max_new_tokens:
            history = ids + out
            window = history if block is None or len(history) < block else history[-(block // 2):]
            n = max_new_tokens - len(out) if block is None else min(max_new_tokens - len(out), block - len(window))
            new = 0
            for token in stream_tokens(self.model, torch.tensor([window], device=device), pick, 0.0, n):
                out.append(token)
                new += 1
                yield token
            if new < n:  # the model ended the text
                return

    def attention(self, text: str, **output_limits):  # nothing is generated: no output limits apply
        """The causal self-attention over `text` (nothing generated)."""
        return self_attention_maps(self.model, self.tokenizer, text, "decoder")



class LMTask:
    name = "lm"
    metrics: tuple[str, ...] = ()
    data_config = LMData
    pipeline = Generator

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.data = cfg, cfg.data
        self.tokenizers: Optional[TokenizerPair] = None
        self.train_ids = self.valid_ids = None
        self.block = cfg.model.build(64, 64).max_positions  # the model's context: the block size
        self.rows = max(1, cfg.data.max_tokens // self.block)  # blocks per micro-batch


    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        t = time.monotonic()
        train, valid = split_text(read_text_file(self.data.corpus), self.data.valid_fraction)
        self.tokenizers = run_tokenizers(self.data, run_dir, dist, fresh, lambda: self._build_tokenizers(train))
        tok = self.tokenizers.src
        self.train_ids = np.asarray(tok.encode(train), dtype=np.int32)
        self.valid_ids = np.asarray(tok.encode(valid), dtype=np.int32)
        if len(self.train_ids) <= self.block or len(self.valid_ids) <= self.block:
            raise ValueError(f"{self.data.corpus}: too short for blocks of {self.block} tokens "
                             f"({len(self.train_ids)} training, {len(self.valid_ids)} validation tokens)")
        unknown = int((self.valid_ids == UNK_ID).sum())
        if unknown:  # text of the validation part that the training part's vocabulary lacks
            log.warning("%s: %d of the %d validation tokens (%.1f%%) are <unk>, not in the training text's vocabulary; "
                        "the validation loss counts them", self.data.corpus, unknown, len(self.valid_ids),
                        100 * unknown / len(self.valid_ids))
        log.info("data ready in %.1f s: %d training and %d validation tokens, vocabulary %d",
                 time.monotonic() - t, len(self.train_ids), len(self.valid_ids), tok.vocab_size)

    def _build_tokenizers(self, train: str) -> TokenizerPair:
        if self.data.vocab_type == "chars":
            return TokenizerPair.shared(CharTokenizer.from_text(train))

        lines = [line for line in train.split("\n") if line.strip()]
        return TokenizerPair.shared(SentencePieceTokenizer.train(lines, vocab_size=self.data.vocab_size,
                                                                 model_type=self.data.vocab_type, seed=self.cfg.train.seed))

    def model_spec(self):
        """`[model] type = "decoder-only"` (GPT), sized to the vocabulary."""
        size = self.tokenizers.src.vocab_size
        return self.cfg.model.type, self.cfg.model.build(size, size)

    def train_data(self, dist: DistInfo) -> Callable[[int], LazyBatches]:
        n_batches = max(1, len(self.train_ids) // (self.rows * self.block * dist.world_size))
        high = len(self.train_ids) - self.block - 1

        def epoch(e: int) -> LazyBatches:
            rng = np.random.default_rng([self.cfg.train.seed, e, dist.rank])
            return blocks(self.train_ids, rng.integers(0, high + 1, size=(n_batches, self.rows)), self.block)

        return epoch

    def valid_data(self) -> list[Blocks]:
        """Every non-overlapping block of the validation tokens, in order (as nanoGPT's and
        `benchmarks/lm_vs_nanogpt.py`'s evaluation read them); the targets after the last whole block,
        fewer than a block, are not scored, and their number is logged."""
        starts = np.arange((len(self.valid_ids) - 1) // self.block) * self.block
        if (tail := (len(self.valid_ids) - 1) % self.block) and len(starts):
            log.info("validation: the last %d of %d target tokens, after the last whole block of %d, are not scored",
                     tail, len(self.valid_ids) - 1, self.block)
        batches = [starts[i:i + self.rows] for i in range(0, len(starts), self.rows)]  # the last may be short
        return [blocks(self.valid_ids, b[None], self.block)[0] for b in batches]

    def loss(self, model, batch: Blocks) -> LossSums:
        logits = model(batch.x)  # (B, T, V)
        return label_smoothed_loss(logits, batch.y, self.cfg.optim.label_smoothing, PAD_ID)

    def n_targets(self, batch: Blocks) -> int:
        return batch.y.numel()

    def validate(self, model) -> dict[str, float]:
        return {}

    def test(self, model_dir: Path, device, progress=None) -> Optional[dict]:
        return None

    def save_extras(self, model_dir: Path) -> None:
        save_tokenizers(self.tokenizers, model_dir)
        write_task_info(model_dir, {"task": self.name, "block": self.block})

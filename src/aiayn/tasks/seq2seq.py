"""What every text-to-text task shares: the encoder-decoder reads a source and writes a target.

Seed 004 §9 shows three uses of one Transformer: translation, summarization (a long text in, a
short summary out) and question answering (`context [SEP] question` in, the answer out). They
differ only in how examples are read, which end of an over-long source is kept, and what is
measured; everything else is here, once:

    vocabulary  `data.tokenizer` (a directory from `aiayn prepare`), else trained once per run
                on the training text into RUN_DIR/tokenizer (with the task's special symbols)
    data        `examples(split)` -> token ids; sources over `data.max_input_tokens` tokens are
                cut at the task's `keep` end, pairs with a side over `data.max_length` are
                dropped; both are counted (`Drops`: a warning, and test_scores.json). With
                `data.subword_dropout`, every epoch segments the training text afresh (BPE-dropout)
    loss        label-smoothed cross-entropy (§5.4) summed over target tokens
    validation  greedy decoding of the validation sources, scored by `scores`
    test        beam search with `[decode]` on `data.test_split` through the task's own
                pipeline, scored by `report`; writes test.hyp and test_scores.json beside the
                model directory
    inference   `TextPipeline`: a `Translator` (or CTranslate2's) set up as the model
                directory's task.json says, behind every door

A subclass defines `name`, `data_config`, `pipeline`, `examples`, `scores` and, if it reports
more than it validates, `report`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import torch

from aiayn.config import BOS_ID, PAD_ID, UNK_ID
from aiayn.data.batching import Batch, LazyBatches
from aiayn.data.corpus import CorpusError, read_corpus, resolve_source
from aiayn.data.preprocess import ParallelDataset
from aiayn.data.synthetic import symbols
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers, train_tokenizers
from aiayn.decoding.attention_maps import attention_maps, forward_attention, with_end
from aiayn.decoding.common import encode_source, input_tokens
from aiayn.decoding.translator import Translator, arithmetic
from aiayn.distributed import DistInfo, main_first
from aiayn.export import MANIFEST
from aiayn.export.ct2_translator import CT2Translator
from aiayn.io import atomic_write
from aiayn.model_dir import read_task_info, translator_options, write_task_info
from aiayn.models.rnn import RNNEncoderDecoder
from aiayn.models.transformer import Transformer
from aiayn.runtime import stable_hash
from aiayn.tasks.base import Drops, run_tokenizers, write_test_scores
from aiayn.tasks.loss import LossSums, add_ponder_cost, label_smoothed_loss, ponder_weight
from aiayn.tasks.pipeline import Pipeline, RequestError
from aiayn.tasks.settings import TextPairSettings, carved

if TYPE_CHECKING:  # annotations only: training builds tasks
    from aiayn.training.config import TrainConfig

log = logging.getLogger(__name__)
UNKNOWN_WARNING = 0.05  # a share of <unk> tokens above this: the vocabulary was made for other text



@dataclass
class Examples:
    """A split's text. refs[i] holds example i's references; refs[i][0] is its training target.
    groups[i] is a label for per-group scores (the bAbI task), empty when there is none."""

    src: list[str]
    refs: list[list[str]]
    groups: list[int] = field(default_factory=list)

    @property
    def tgt(self) -> list[str]:
        return [r[0] for r in self.refs]

    def head(self, n: int) -> "Examples":
        """The first `n` examples (all when n <= 0)."""
        if n <= 0:
            return self
        return Examples(self.src[:n], self.refs[:n], self.groups[:n])

    def spread(self, n: int) -> "Examples":
        """`n` examples evenly spaced over the split (all when n <= 0), so every group is in."""
        if n <= 0 or n >= len(self.src):
            return self
        return self.pick([i * len(self.src) // n for i in range(n)])

    def carve(self, held: bool, fraction: float, offset: float = 0.0) -> "Examples":
        """The examples whose source `settings.carved` holds out (held=True) or keeps (held=False)."""
        return self.pick([i for i, s in enumerate(self.src) if carved(s, fraction, offset) == held])

    def pick(self, idx: Sequence[int]) -> "Examples":
        """The examples at `idx`, in that order."""
        return Examples([self.src[i] for i in idx], [self.refs[i] for i in idx],
                        [self.groups[i] for i in idx] if self.groups else [])


class Seq2SeqTask:
    name = ""
    metrics: tuple[str, ...] = ()  # the names `scores` gives
    lower_is_better: tuple[str, ...] = ()  # those of them where a smaller value wins
    metrics_need_decoding = True  # validation scores `metrics` only when train.bleu decodes its sources
    data_config: type = TextPairSettings
    pipeline: type = Pipeline  # a `TextPipeline` subclass
    keep = "start"  # which end of an over-long source survives truncation ("end": the question)
    user_symbols: tuple[str, ...] = ()  # pieces of their own in a trained vocabulary, e.g. "[SEP]"

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.data = cfg, cfg.data
        self.tokenizers: Optional[TokenizerPair] = None
        self.train_set: Optional[ParallelDataset] = None
        self.valid_set: Optional[ParallelDataset] = None
        self.valid_examples: Optional[Examples] = None
        self.drops = Drops()

    # -- what a subclass says ----------------------------------------------------------------
    def examples(self, split: str) -> Examples:
        raise NotImplementedError

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        """Validation metrics of `hyps` (higher is better unless `lower_is_better` lists the name)."""
        raise NotImplementedError

    def report(self, hyps: list[str], examples: Examples) -> dict:
        """What the test evaluation writes; by default the validation metrics."""
        return self.scores(hyps, examples)

    def task_info(self) -> dict:
        """More for task.json (the translation task: its language pair, which a server announces)."""
        return {}

    def valid_subset(self, examples: Examples, n: int) -> Examples:
        """The validation examples decoded at each validation (`data.valid_max_sentences`): the first n."""
        return examples.head(n)

    # -- data ---------------------------------------------------------------------------------
    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        data, t = self.data, time.monotonic()
        self.check_test_split()
        self.tokenizers = self._tokenizers(run_dir, dist, fresh)
        with main_first(dist):  # rank 0 tokenizes into the cache; the others load what it wrote
            full = self.dataset(data.train_split)
            valid = self.dataset(data.valid_split) if data.valid_split else None
        warn_unknown(full, f"{data.corpus} split {data.train_split!r}", data.tokenizer)
        self.train_set = full.filter(max_len=data.max_length)
        self.drops.note(data.train_split, "too_long", len(full) - len(self.train_set), len(full),
                        f"a side over data.max_length = {data.max_length} tokens")
        if len(self.train_set) == 0:
            raise ValueError(f"no usable training pairs in {data.corpus} split {data.train_split!r} "
                             f"(all empty, or longer than data.max_length = {data.max_length})")
        if data.valid_split:
            self.valid_set = valid
            self.valid_examples = self.valid_subset(self.examples(data.valid_split), data.valid_max_sentences)
        log.info("data ready in %.1f s: %d training pairs, %d validation", time.monotonic() - t,
                 len(self.train_set), len(self.valid_set) if self.valid_set is not None else 0)

    def dataset(self, split: str) -> ParallelDataset:
        """Token ids of `split`, sources cut to `data.max_input_tokens` (EOS included) at the task's end."""
        ids = self.load(split)
        if not self.data.max_input_tokens:
            return ids
        cut, n_cut = self.cut(ids)
        self.drops.note(split, "truncated", n_cut, len(ids),
                        f"sources over {self.data.max_input_tokens} tokens, the {self.keep} kept")
        return cut

    def cut(self, ids: ParallelDataset) -> tuple[ParallelDataset, int]:
        """(`ids` with sources cut to `data.max_input_tokens` at the task's end, how many were cut)."""
        limit = self.data.max_input_tokens
        return ids.cut_sources(limit - 1, self.keep) if limit else (ids, 0)  # EOS is added at collation

    def load(self, split: str) -> ParallelDataset:
        """Token ids of `split` as read (a subclass may read them through a cache)."""
        ex = self.examples(split)
        return ParallelDataset.from_ids(self.tokenizers.src.encode_batch(ex.src), self.tokenizers.tgt.encode_batch(ex.tgt))

    def read_pairs(self, split: str, data_dir: str = "", clean: Callable[[str], str] = str) -> Examples:
        """The pairs of `split` in `data.corpus` (a directory of {split}.{lang} files or one TSV file),
        each side through `clean`; the pairs with an empty side are counted (`Drops`)."""
        data = self.data
        corpus = read_corpus(data.corpus, split=split, langs=(data.src_lang, data.tgt_lang), data_dir=data_dir or None)
        self.drops.note(split, "empty", corpus.stats.n_empty, corpus.stats.n_read, "pairs with an empty side")
        return Examples([clean(s) for s in corpus.src], [[clean(t)] for t in corpus.tgt])

    def check_test_split(self) -> None:
        """A missing test split is an error now, not after the training."""
        if self.data.test_split:
            self.examples(self.data.test_split)

    def train_texts(self) -> tuple[list[str], list[str]]:
        """(sources, targets) of the training split, to build a vocabulary from."""
        ex = self.examples(self.data.train_split)
        return ex.src, ex.tgt

    def _tokenizers(self, run_dir: Path, dist: DistInfo, fresh: bool) -> TokenizerPair:
        return run_tokenizers(self.data, run_dir, dist, fresh, self._build_tokenizers)

    def _build_tokenizers(self) -> TokenizerPair:
        src, tgt = self.train_texts()
        if not any(s.strip() for s in src):
            raise ValueError(f"no usable pairs in {self.data.corpus} split {self.data.train_split!r} "
                             "to build a vocabulary from")
        return build_tokenizers(self.data, src, tgt, self.cfg.train.seed, self.user_symbols)

    def model_spec(self):
        """`[model] type`: the encoder-decoder (default) or another sequence-to-sequence model, e.g. "rnn"."""
        pair = self.tokenizers
        config = self.cfg.model.build(pair.src.vocab_size, pair.tgt.vocab_size)
        return self.cfg.model.type, config if pair.joint else apart(config, dict(self.cfg.model.overrides))

    def train_data(self, dist: DistInfo) -> Callable[[int], LazyBatches]:
        """epoch -> this rank's deterministic batches; `max_tokens` bounds src.numel() + tgt_in.numel()."""
        data = self.data

        def sampler(pairs: ParallelDataset):
            made = pairs.sampler(data.max_tokens, seed=self.cfg.train.seed, rank=dist.rank, world_size=dist.world_size,
                                 skip_overlong=True, sort_by_length=data.batching == "bucket")
            self.note_skipped(data.train_split, made, len(pairs))
            return made

        if not data.subword_dropout:
            fixed = sampler(self.train_set)
            return lambda epoch: _batches(self.train_set, fixed.batches(epoch))

        tok, kept = self.tokenizers, [self.train_set[i] for i in range(len(self.train_set))]
        texts = ([tok.src.decode(s) for s, _ in kept], [tok.tgt.decode(t) for _, t in kept])  # decoding round-trips

        def epoch_data(epoch: int) -> LazyBatches:
            pairs = self.segmented(texts, epoch)
            return _batches(pairs, sampler(pairs).batches(epoch))
        return epoch_data

    def segmented(self, texts: tuple[Sequence[str], Sequence[str]], epoch: int) -> ParallelDataset:
        """The training pairs `texts` (sources, targets) of `epoch` under BPE-dropout (Provilkov et al.,
        2020): each merge skipped with probability `data.subword_dropout`, the same on every rank and on
        resuming. Sources are cut and long pairs dropped as in `prepare` (counted, as "too_long_segmented")."""
        data, tok, seed = self.data, self.tokenizers, self.cfg.train.seed
        src = tok.src.encode_dropout(texts[0], data.subword_dropout, stable_hash(f"{seed}:{epoch}:src"))
        tgt = tok.tgt.encode_dropout(texts[1], data.subword_dropout, stable_hash(f"{seed}:{epoch}:tgt"))
        pairs = ParallelDataset.from_ids(src, tgt)
        cut = self.cut(pairs)[0]
        pairs = cut.filter(max_len=data.max_length)
        self.drops.note(data.train_split, "too_long_segmented", len(cut) - len(pairs), len(cut),
                        f"a side over data.max_length = {data.max_length} tokens as epoch {epoch} segments it")
        log.info("epoch %d segmented with BPE-dropout %.2f: %d pairs, %d target tokens (%.2fx the fixed segmentation)",
                 epoch, data.subword_dropout, len(pairs), pairs.tgt_lengths.sum(),
                 pairs.tgt_lengths.sum() / max(self.train_set.tgt_lengths.sum(), 1))
        return pairs

    def valid_data(self) -> Optional[list[Batch]]:
        if self.valid_set is None:
            return None
        sampler = self.valid_set.sampler(self.data.max_tokens, shuffle=False, skip_overlong=True)
        # under a name of its own: a test split that is the validation split decodes and scores every pair
        self.note_skipped(f"{self.data.valid_split} (validation batches)", sampler, len(self.valid_set))
        return list(_batches(self.valid_set, sampler.batches(0)))

    def note_skipped(self, split: str, sampler, total: int) -> None:
        """Count the pairs `sampler` leaves out, each alone over data.max_tokens."""
        self.drops.note(split, "skipped", sampler.n_skipped, total,
                        f"a pair alone over data.max_tokens = {self.data.max_tokens} tokens")

    # -- training -------------------------------------------------------------------------
    def loss(self, model, batch: Batch) -> LossSums:
        logits, ponder = model(batch.src, batch.tgt_in, with_ponder=True)  # (B, T, V); ponder: ACT's, or None
        return add_ponder_cost(label_smoothed_loss(logits, batch.tgt_out, self.cfg.optim.label_smoothing, PAD_ID),
                               ponder, ponder_weight(model))

    def n_targets(self, batch: Batch) -> int:
        return batch.n_tgt_tokens

    # -- validation, test, inference --------------------------------------------------------
    def translator(self, model):
        return Translator(model, self.tokenizers, self.cfg.decode, **self.inference_options())

    def inference_options(self) -> dict:
        """Translator options that make inference read a source as training did."""
        return {"keep": self.keep, "max_input_tokens": self.data.max_input_tokens or None}

    def validate(self, model) -> dict[str, float]:
        """`scores` of greedy outputs on the validation examples, when `train.bleu` (decode at validation)."""
        if not (self.cfg.train.bleu and self.valid_examples):
            return {}
        hyps = self.translator(model).translate(self.valid_examples.src, method="greedy")
        return self.scores(hyps, self.valid_examples)

    def test(self, model_dir: Path, device, progress: Optional[Callable[..., None]] = None) -> Optional[dict]:
        """`report` of the model in `model_dir` on `data.test_split`, decoded with `[decode]` through
        the task's pipeline (the door every user goes through); `progress(n, total)` after each n sentences. Writes test.hyp and test_scores.json
        beside `model_dir`. None without a test split."""
        if not self.data.test_split:
            return None
        t, split = time.monotonic(), self.data.test_split
        ex = self.examples(split)
        pipeline = self.pipeline.from_pretrained(model_dir, device=device, decode=self.cfg.decode)
        cut = pipeline.count_cut(ex.src)
        self.drops.note(split, "truncated", cut, len(ex.src), f"sources over {pipeline.translator.max_input_tokens} "
                                                             f"tokens, the {pipeline.translator.keep} kept")
        log.info("test: decoding the %d sentences of %s with %s (data.test_split = \"\" skips it)", len(ex.src), split,
                 f"beam {self.cfg.decode.beam_size}" if self.cfg.decode.method == "beam" else self.cfg.decode.method)
        hyps = pipeline.run(ex.src, progress=progress and (lambda n: progress(n, len(ex.src))))
        result = {"split": split, **self.report(hyps, ex), "beam_size": self.cfg.decode.beam_size,
                  "length_penalty": self.cfg.decode.length_penalty, "n_sentences": len(hyps),
                  "dropped": self.drops.of(split), "dropped_elsewhere": self.drops.besides(split),
                  "seconds": time.monotonic() - t}
        with atomic_write(Path(model_dir).parent / "test.hyp") as tmp:
            tmp.write_text("".join(" ".join(h.splitlines()) + "\n" for h in hyps), encoding="utf-8")
        write_test_scores(model_dir, result)
        return result

    def save_extras(self, model_dir: Path) -> None:
        """The tokenizers and task.json: the task, how its sources are truncated, its decoding defaults."""
        save_tokenizers(self.tokenizers, model_dir)
        write_task_info(model_dir, {"task": self.name, "decode": dataclasses.asdict(self.cfg.decode),
                                    **self.inference_options(), **self.task_info()})


def warn_unknown(ids: ParallelDataset, what: str, tokenizer: str = "") -> None:
    """Log a warning when more than UNKNOWN_WARNING of either side's tokens (the first 4M) are <unk>: a vocabulary
    trained on other text (`data.tokenizer` of another run) turns a corpus into <unk>s, and the model then
    learns to write nothing."""
    for side, share in zip(("source", "target"), ids.share(UNK_ID)):
        if share > UNKNOWN_WARNING:
            log.warning("%s: %.1f%% of the %s tokens are <unk>; the vocabulary (%s) does not cover this text",
                        what, 100 * share, side, f"data.tokenizer = {tokenizer}" if tokenizer else "trained here")


def _batches(dataset: ParallelDataset, indices: list[list[int]]) -> LazyBatches:
    """A rank's batches of one epoch, collated on access (so only indices are kept)."""
    return LazyBatches(len(indices), lambda i: dataset.collate(indices[i]))


def build_tokenizers(data, src: Sequence[str], tgt: Sequence[str], seed: int,
                     user_symbols: Sequence[str] = ()) -> TokenizerPair:
    """Whitespace symbols, or sentencepiece trained on the training text (joint by default, §3.4)."""
    if data.vocab_type == "symbols":
        if data.corpus == "synthetic":
            return TokenizerPair.shared(SymbolTokenizer(symbols(data.n_symbols)))
        side = lambda texts: sorted({w for t in texts for w in t.split()} | set(user_symbols))  # noqa: E731
        if not tgt or data.joint_vocab:  # one side (a classifier's texts) is one vocabulary
            return TokenizerPair.shared(SymbolTokenizer(side(list(src) + list(tgt))))
        return TokenizerPair(SymbolTokenizer(side(src)), SymbolTokenizer(side(tgt)))

    return train_tokenizers(src, tgt, vocab_size=data.vocab_size, model_type=data.vocab_type,
                            joint=not tgt or data.joint_vocab, seed=seed, user_symbols=user_symbols)


BACKENDS = ("native", "ctranslate2")


class TextPipeline(Pipeline):
    """The door of a text-to-text task: a translator (aiayn's `Translator`, or with
    `backend="ctranslate2"` a `CT2Translator` on an `aiayn export ctranslate2` directory) set up
    as the model directory's task.json says: its decoding defaults and how long sources are cut.
    A subclass says how an input becomes a source (`source`) and adds its routes."""

    backends = BACKENDS
    model_types = (Transformer.model_type, RNNEncoderDecoder.model_type)  # the sequence-to-sequence models
    # the Translator's (or CTranslate2's): how its decoder computes, how sources are cut and batched, its defaults
    load_options = ("precision", "quantize", "max_input_tokens", "batch_tokens", "keep", "decode", "sampling")

    def __init__(self, translator, info: dict, backend: str = "native"):
        self.translator, self.info, self.backend = translator, info, backend

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu", backend: str = "native",
                        **options) -> "TextPipeline":
        """`options` go to the translator (decode, sampling, max_input_tokens, batch_tokens) and win over
        task.json when not None."""
        info = read_task_info(model_dir, expect=cls.task)
        return cls(load_backend(backend, model_dir, device, info, options), info, backend)

    def source(self, given) -> str:
        return given

    def prepare(self, inputs) -> list[str]:
        return [self.source(x) for x in inputs]

    def count_cut(self, sources: list[str]) -> int:
        """How many of `sources` the translator will cut (it warns when it does)."""
        limit = self.translator.max_input_tokens
        return sum(len(input_tokens(self.translator.tokenizers.src, s)) + 1 > limit for s in sources) if limit else 0

    def run(self, sources: list[str], progress=None, nbest: Optional[int] = None, return_attention: bool = False,
            **options) -> list:
        """Outputs of `sources`: texts, or (text, score) n-best lists with `nbest`; with
        `return_attention`, each paired with the 1-best's cross-attention (`cross_attention`)."""
        results = self.translator.translate(sources, nbest=nbest, progress=progress, **options)
        if not return_attention:
            return results
        if self.backend != "native":
            raise RequestError(f"return_attention: attention weights are not available with the {self.backend} backend", 400)
        decode, _ = self.translator.settings(options, nbest)  # the length limits these outputs had
        best = [r if isinstance(r, str) else r[0][0] for r in results]
        return [(r, cross_attention(self.translator, s, b, decode)) for s, r, b in zip(sources, results, best)]

    def session(self, return_attention: bool = False, **options):
        return None if return_attention else self.translator.continuous(**options)

    def text(self, output) -> str:
        return output if isinstance(output, str) else output[0][0]

    def attention(self, given, max_len_a: Optional[float] = None, max_len_b: Optional[int] = None):
        """The attention maps of the greedy output for one input, its source cut as the door cuts it;
        the output length limit is the directory's unless given."""
        tr = self.translator
        ids = encode_source(tr.tokenizers.src, self.prepare([given])[0], tr.max_input_tokens, tr.keep)
        if len(ids) < 2:
            raise ValueError("the sentence to translate is empty")
        a = tr.decode.max_len_a if max_len_a is None else max_len_a
        return attention_maps(fp32_model(tr), tr.tokenizers, ids, a, tr.decode.max_len_b if max_len_b is None else max_len_b)


def fp32_model(translator):
    """The model whose attention is read: an int8 Translator keeps int8 weights only (`Translator.refresh`)."""
    if translator.model is None:
        raise RequestError("attention weights need the model's fp32 weights, and an int8 model keeps only its int8 "
                           "ones: load it without quantize='int8' (--quantize)", 400)
    return translator.model

def load_backend(backend: str, model_dir: str | Path, device, info: dict, options: dict):
    """The translator of `model_dir`: aiayn's `Translator` ("native") or, for a directory written by
    `aiayn export ctranslate2`, a `CT2Translator` ("ctranslate2"); both set up as task.json says."""
    options = {**translator_options(info, model_dir), **{k: v for k, v in options.items() if v is not None}}
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "ctranslate2":
        return CT2Translator.from_pretrained(model_dir, device=device, **ct2_compute_type(options))
    if (Path(model_dir) / MANIFEST).is_file():
        raise ValueError(f"{model_dir}: a CTranslate2 export ({MANIFEST}); serve it with --backend ctranslate2")

    return Translator.from_pretrained(model_dir, device=device, **options)


def ct2_compute_type(options: dict) -> dict:
    """`precision`/`quantize` as CTranslate2's compute_type: int8, bfloat16, or the export's own."""
    precision, quantize = options.pop("precision", None), options.pop("quantize", None)
    chosen = arithmetic(precision, quantize) if precision or quantize else None  # neither: the export's own
    return {**options, "compute_type": {"int8": "int8", "bf16": "bfloat16", "fp32": "float32"}.get(chosen, "default")}


def cross_attention(translator, source: str, output: str, decode) -> dict:
    """The encoder-decoder attention of `output` given `source` (one teacher-forced pass of the
    output's tokens, re-encoded from its text, with the EOS that ended it unless `decode`'s length
    limit did): layers x heads x target x source, with the pieces."""
    tok, device = translator.tokenizers, translator.device
    src = torch.tensor([encode_source(tok.src, source, translator.max_input_tokens, translator.keep)], device=device)
    model = fp32_model(translator)
    out = with_end(model, src, tok.tgt.encode(output), decode.max_len_a, decode.max_len_b)
    _, _, per_layer = forward_attention(model, src, torch.tensor([[BOS_ID, *out[:-1]]], device=device))
    cross = torch.stack([w[0] for w in per_layer]).float().cpu()  # (L, H, T, S)
    return {"weights": [[[[round(x, 4) for x in row] for row in head] for head in layer] for layer in cross.tolist()],
            "source": tok.src.pieces(src[0].tolist()), "target": tok.tgt.pieces(out)}


def refuse_one_file_for(data, splits: Sequence[str], data_dir: str = "") -> None:
    """A corpus of one TSV file holds one split, the training pairs, and is read again whatever split is
    asked for: `splits` (the names of the settings of the other splits the run reads from the corpus, e.g.
    "test_split") must then be none, or the test would score the training pairs."""
    _, one_file = resolve_source(data.corpus, data.train_split, (data.src_lang, data.tgt_lang), data_dir or None)
    others = [f"data.{name} = {getattr(data, name)!r}" for name in splits]
    if one_file and others:
        raise CorpusError(f"{data.corpus}: one TSV file holds one split, the training pairs, so it cannot also give "
                          f"{' and '.join(others)}: use a directory of {{split}}.{data.src_lang} / "
                          f"{{split}}.{data.tgt_lang} files, or set those splits to \"\"")


def apart(config, overrides: dict):
    """`config` for a source and a target vocabulary of their own (`data.joint_vocab = false`, or a
    `data.tokenizer` with one per side), which may be equal in size (sentencepiece fills each side
    to `data.vocab_size`): one embedding matrix would give a German and an English piece one vector
    (§3.4 shares it only for a joint vocabulary), and copy attention would copy a source id as the
    target piece of that number. Refused where asked for, unshared where only defaulted."""
    for key in ("share_embeddings", "copy_attention"):
        if overrides.get(key):
            raise ValueError(f"model.{key} = true needs a joint vocabulary, and this run's source and target "
                             "vocabularies are apart (data.joint_vocab = false, or data.tokenizer's)")
    shared = getattr(config, "share_embeddings", False)
    return dataclasses.replace(config, share_embeddings=False) if shared else config


"""Translation (§5-§6): parallel text in, sacreBLEU out, `Translator` for inference.

    data        a corpus (`aiayn.data`: a registered name, a {split}.{lang} directory, a TSV
                file) read and tokenized through `load_parallel`, whose cache `aiayn prepare`
                fills; or the built-in synthetic task. Source = ids + EOS, target BOS + y -> y + EOS.
    validation  greedy sacreBLEU on the validation text (`train.bleu`)
    test        beam search with `[decode]` (beam 4, α 0.6) on `data.test_split`: sacreBLEU
    inference   `TranslationPipeline`: `aiayn translate`, and over HTTP LibreTranslate's /translate and
                /languages, and /v1/translate (`aiayn.serve.routes.translation`)

Vocabulary, loss, batching and the test run are the shared ones of `aiayn.tasks.seq2seq`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch

from aiayn import metrics
from aiayn.data.corpus import Side, resolve_source, stream_corpus
from aiayn.data.preprocess import ParallelDataset, load_parallel
from aiayn.data.synthetic import synthetic_pairs
from aiayn.decoding.common import encode_source
from aiayn.decoding.streaming import stream_search, text_pieces
from aiayn.decoding.translator import line_seed
from aiayn.tasks.pipeline import RequestError
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask, TextPipeline, refuse_one_file_for
from aiayn.tasks.settings import TextPairSettings, check, check_positive

__all__ = ["TranslationData", "TranslationTask", "TranslationPipeline"]


@dataclass(frozen=True)
class TranslationData(TextPairSettings):
    """corpus: "synthetic" (the built-in task `task`, see aiayn.data.synthetic), a registered
    corpus name ("multi30k", ...; looked up in `data_dir`, else downloaded), a directory of
    `{split}.{lang}[.gz]` files, or a TSV file (see aiayn.data.corpus.resolve_source)."""

    corpus: str = "synthetic"
    data_dir: str = ""  # local copy of a registered corpus; "" = $AIAYN_DATA_DIR or download
    # many-to-one training: more source languages line-aligned with the same targets (Multi30k's
    # fr and cs captions of the images its de and en describe), read for the training split and
    # the vocabulary only; validation and test read src_lang (Johnson et al., 2017, §3: many-to-one)
    extra_src_langs: tuple[str, ...] = ()
    # the synthetic corpus only
    task: str = "reverse"
    n_train: int = 20000
    n_valid: int = 200
    n_symbols: int = 10
    min_len: int = 3
    max_len: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "n_train", "n_valid", "n_symbols")
        check(1 <= self.min_len <= self.max_len, f"data: need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        check(self.src_lang != self.tgt_lang or self.corpus == "synthetic",
              f"data.src_lang and data.tgt_lang are both {self.src_lang!r}")
        object.__setattr__(self, "extra_src_langs", tuple(self.extra_src_langs))  # TOML gives a list
        extra = self.extra_src_langs
        check(not extra or (self.corpus != "synthetic" and len(set(extra)) == len(extra)
                            and not {self.src_lang, self.tgt_lang} & set(extra)),
              f"data.extra_src_langs must name distinct languages of the corpus other than {self.src_lang!r} "
              f"and {self.tgt_lang!r}, got {extra!r}")


class TranslationPipeline(TextPipeline):
    """`load_pipeline(DIR)` of a translation model; `pipeline.translate(texts, **options)`."""

    task, command, metric = "translation", "translate", "bleu"
    routes = "aiayn.serve.routes.translation:ROUTES"

    def translate(self, texts, **options) -> list:
        return self(texts, **options)

    def __call__(self, inputs, progress=None, target: str | None = None, **options) -> list:
        """Outputs for `inputs`; `target` names the language of a multilingual model's outputs (`targeted`)."""
        return self.run(self.targeted(self.prepare(inputs), target), progress=progress, **options)

    def directions(self) -> tuple[tuple[str, str], ...]:
        """task.json's "directions" (a multilingual model: one source, a tag per target), else its
        "languages" pair; () for a directory that names no languages (it takes any pair)."""
        if self.info.get("directions"):
            return tuple((s, t) for s, t in self.info["directions"])
        pair = self.info.get("languages")
        return ((pair[0], pair[1]),) if pair else ()

    def targets(self) -> list[str]:
        """The languages this model translates into (task.json's directions), in order."""
        return list(dict.fromkeys(t for _, t in self.directions()))

    def targeted(self, texts: list[str], target: str | None) -> list[str]:
        """What the model reads to translate `texts` into `target`. A multilingual model's sources start with
        the target's tag (task.json's "target_tag", e.g. "<2{}>": Johnson et al., 2017), one space before the
        text, as in training (the text's own edge white space goes: `input_tokens`). A target it does not
        serve is refused naming the served ones; so is a text whose own tag would override `target`, and,
        without `target`, an untagged text (it would come out in whichever language the model leans to).
        A model of one pair takes its own target or none."""
        served, tag = self.targets(), self.info.get("target_tag")
        if target and served and target not in served:
            raise ValueError(f"target {target!r}: this model translates into {', '.join(served)}")
        if not tag:
            return texts
        typed = re.compile(re.escape(tag).replace(re.escape("{}"), r"(\S+?)") + r"(?:\s|$)")
        out = []
        for i, text in enumerate(texts):
            found = typed.match(text.strip())
            if found and target:
                raise ValueError(f"text {i + 1} starts with the tag {found.group(0).strip()!r}, and the target is "
                                 f"{target!r}: name the target once (drop the tag from the text)")
            if found and found.group(1) not in served:
                raise ValueError(f"text {i + 1}: unknown target tag {found.group(0).strip()!r}; this model "
                                 f"translates into {', '.join(served)}")
            if not found and not target and text.strip():
                raise ValueError(f"this model translates into {', '.join(served)}: name the target (--target, "
                                 f"target=, or a tag such as {tag.format(served[0])!r} before the text)")
            out.append(text if found or not text.strip() else f"{tag.format(target)} {text.strip()}")
        return out

    def _settings(self, options: dict):
        """The translator's settings with a request's `options`; fields each fine but not together (min_len
        with no_repeat_ngram_size 1 beyond the vocabulary) are the request's fault, a 422."""
        try:
            return self.translator.settings(options)
        except ValueError as e:
            raise RequestError(str(e)) from None

    def stream(self, source: str, **options) -> Iterator[str]:
        """The translation of one source (as `run` gives it with these options) in pieces of text as
        it is decoded: greedy search or sampling only (a beam's best changes until it ends)."""
        if self.backend != "native":
            raise RequestError(f"stream: not available with the {self.backend} backend", 400)
        tr = self.translator
        decode, sampling = self._settings(options)
        if decode.method == "beam" and decode.beam_size > 1:
            raise RequestError("stream: beam search has no output until it ends; use method greedy or sample", 400)

        if not source.strip():  # as `run` translates a blank line: to nothing
            return iter(())
        src = torch.tensor([encode_source(tr.tokenizers.src, source, tr.max_input_tokens, tr.keep)], device=tr.device)
        seed = None if sampling.seed is None else line_seed(sampling.seed, 0)  # as `translate` seeds its first line
        return text_pieces(stream_search(tr.decoder, src, decode, sampling, seed), tr.tokenizers.tgt.decode)


class TranslationTask(Seq2SeqTask):
    name = "translation"
    metrics = ("bleu",)
    data_config = TranslationData
    pipeline = TranslationPipeline

    def examples(self, split: str) -> Examples:
        if self.data.corpus == "synthetic":
            return synthetic_text(self.data, split, self.cfg.train.seed)
        return self.read_pairs(split, self.data.data_dir)

    def load(self, split: str) -> ParallelDataset:
        """Token ids of `split`: through `load_parallel` and its cache, or the synthetic task's pairs."""
        data = self.data
        if data.corpus == "synthetic":
            ex = self.examples(split)
            return ParallelDataset.from_corpus(list(zip(ex.src, ex.tgt)), self.tokenizers)
        ids = ParallelDataset.concat([
            load_parallel(data.corpus, self.tokenizers, split=split, langs=(source, data.tgt_lang),
                          data_dir=data.data_dir or None) for source in self.source_langs(split)])
        self.drops.note(split, "empty", ids.stats.n_empty, ids.stats.n_read, "pairs with an empty side")
        return ids

    def source_langs(self, split: str) -> tuple[str, ...]:
        """The source languages read for `split`: with data.extra_src_langs, those too in training."""
        data = self.data
        return (data.src_lang, *data.extra_src_langs) if split == data.train_split else (data.src_lang,)

    def train_texts(self) -> tuple[Iterable[str], Iterable[str]]:
        """The training text to build a vocabulary from: every source language's, and the targets, read
        from the files as the vocabulary's training goes (a WMT-sized corpus is never held as text)."""
        data = self.data
        if data.corpus == "synthetic":
            return super().train_texts()
        streams = [stream_corpus(data.corpus, data.train_split, (lang, data.tgt_lang), data.data_dir or None)
                   for lang in self.source_langs(data.train_split)]
        return Side(tuple(streams), 0), Side(tuple(streams[:1]), 1)

    def check_test_split(self) -> None:
        """The test split's files exist (found without reading them), and a corpus of one TSV file (one
        split: it would be read again for every split) is not asked for validation or test pairs."""
        data = self.data
        if data.corpus == "synthetic":
            return

        langs = (data.src_lang, data.tgt_lang)
        refuse_one_file_for(data, [name for name in ("valid_split", "test_split") if getattr(data, name)], data.data_dir)
        if data.test_split:
            resolve_source(data.corpus, data.test_split, langs, data.data_dir or None)

    def task_info(self) -> dict:
        return {"languages": [self.data.src_lang, self.data.tgt_lang]}

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        return {"bleu": metrics.bleu(hyps, examples.tgt).score}

    def report(self, hyps: list[str], examples: Examples) -> dict:
        score = metrics.bleu(hyps, examples.tgt)
        return {"bleu": score.score, "detail": score.detail, "signature": score.signature}


def synthetic_text(data: TranslationData, split: str, seed: int) -> Examples:
    """The synthetic task's pairs of `split`: train seed, valid seed + 1, test seed + 2."""
    n, offset = (data.n_train, 0) if split == data.train_split else (data.n_valid, 1 if split == data.valid_split else 2)
    pairs = synthetic_pairs(data.task, n, seed=seed + offset, n_symbols=data.n_symbols,
                            min_len=data.min_len, max_len=data.max_len)
    return Examples([s for s, _ in pairs], [[t] for _, t in pairs])

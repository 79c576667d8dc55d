"""Multilingual translation in one model (Johnson et al., 2017): one source language into several
targets, the target named by a tag at the start of the source ("<2de> A dog runs.").

The training data is every (source, target) pair of a line-aligned corpus, each source tagged
with its target (Multi30k: en with de, fr and cs, `recipes/multi30k-en-multi.toml`); the tags are
pieces of their own in the vocabulary. The model directory is a translation model: its task.json
says "translation", with its "directions" and its "target_tag", so `TranslationPipeline` serves it
and a server lists and routes its pairs; the test split is scored per direction.

A recipe names this task by its import path: task = "aiayn.tasks.multilingual:MultilingualTranslationTask".
"""

from __future__ import annotations

from dataclasses import dataclass

from aiayn import metrics
from aiayn.data.corpus import CorpusError, read_corpus, resolve_source
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask
from aiayn.tasks.settings import check
from aiayn.tasks.translation import TranslationData, TranslationTask


@dataclass(frozen=True)
class MultilingualData(TranslationData):
    """`src_lang` into each of `tgt_langs` (data.tgt_lang is not used: leave it unset)."""

    tgt_langs: tuple[str, ...] = ()
    target_tag: str = "<2{}>"  # the tag of target language {}, in front of every source

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "tgt_langs", tuple(self.tgt_langs))  # TOML gives a list
        check(self.corpus != "synthetic", "data.corpus: multilingual translation reads a corpus of named languages")
        check(len(self.tgt_langs) >= 1 and len(set(self.tgt_langs)) == len(self.tgt_langs)
              and self.src_lang not in self.tgt_langs,
              f"data.tgt_langs must name distinct targets other than {self.src_lang!r}, got {self.tgt_langs!r}")
        check("{}" in self.target_tag and " " not in self.target_tag,
              f"data.target_tag must hold {{}} (the language) and no space, got {self.target_tag!r}")
        check(self.tgt_lang == TranslationData.tgt_lang, "data.tgt_lang is not used here: name the targets in data.tgt_langs")
        check(not self.extra_src_langs, "data.extra_src_langs: multilingual translation reads one source language")


class MultilingualTranslationTask(TranslationTask):
    name = "translation"  # its model directories are translation models
    data_config = MultilingualData

    def __init__(self, cfg):
        super().__init__(cfg)
        self.user_symbols = tuple(self.tag(t) for t in self.data.tgt_langs)

    def tag(self, target: str) -> str:
        return self.data.target_tag.format(target)

    def examples(self, split: str) -> Examples:
        """Every target's pairs of `split`, one target after another; groups[i]: the target's index."""
        data, src, refs, groups, n_empty, n_read = self.data, [], [], [], 0, 0
        for g, target in enumerate(data.tgt_langs):
            corpus = read_corpus(data.corpus, split=split, langs=(data.src_lang, target), data_dir=data.data_dir or None)
            src += [f"{self.tag(target)} {s}" for s in corpus.src]
            refs += [[t] for t in corpus.tgt]
            groups += [g] * len(corpus.src)
            n_empty, n_read = n_empty + corpus.stats.n_empty, n_read + corpus.stats.n_read
        self.drops.note(split, "empty", n_empty, n_read, "pairs with an empty side")
        return Examples(src, refs, groups)

    def load(self, split: str):
        return Seq2SeqTask.load(self, split)  # the tagged text, tokenized here (not through the preprocessing cache)

    def check_test_split(self) -> None:
        """The test split's files exist, and the corpus is not one TSV file: that holds one language pair, and
        was read again as every target's pairs, and as every split's (validation and test on the training pairs)."""
        data = self.data
        _, one_file = resolve_source(data.corpus, data.train_split, (data.src_lang, data.tgt_langs[0]), data.data_dir or None)
        if one_file:
            raise CorpusError(f"{data.corpus}: one TSV file holds one language pair; multilingual translation reads a "
                              "directory of {split}.{lang} files, one per language of data.tgt_langs")
        if data.test_split:
            for target in data.tgt_langs:
                resolve_source(data.corpus, data.test_split, (data.src_lang, target), data.data_dir or None)

    def valid_subset(self, examples: Examples, n: int) -> Examples:
        return examples.spread(n)  # every target in

    def task_info(self) -> dict:
        data = self.data
        return {"languages": [data.src_lang, data.tgt_langs[0]], "target_tag": data.target_tag,
                "directions": [[data.src_lang, t] for t in data.tgt_langs]}

    def report(self, hyps: list[str], examples: Examples) -> dict:
        """sacreBLEU over every direction, and per direction (with its signature)."""
        report = {**super().report(hyps, examples), "per_direction": {}}
        for g, target in enumerate(self.data.tgt_langs):
            idx = [i for i, group in enumerate(examples.groups) if group == g]
            score = metrics.bleu([hyps[i] for i in idx], [examples.tgt[i] for i in idx])
            report["per_direction"][f"{self.data.src_lang}-{target}"] = {"bleu": score.score, "signature": score.signature}
        return report

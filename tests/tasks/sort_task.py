"""A task that aiayn does not know: sorting a list of numbers. Everything it needs is here, built
on aiayn's public bases: its `[data]` settings, its data, its metric, its pipeline, its HTTP
route and its CLI line format, each a small adapter beside the pipeline (`ROUTES` and `LINES`, named
by `SortPipeline.routes` and `SortPipeline.lines` as aiayn's own are). A recipe names it by its import path,
`task = "sort_task:SortTask"` (issue 28's plug-in proof)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from aiayn.commands.lines import LineFormat
from aiayn.serve.routes import Route
from aiayn.serve.routes.fields import Body
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask, TextPipeline
from aiayn.tasks.settings import TextPairSettings

NAME = "sort_task:SortTask"  # what task.json records: the name a recipe gave


@dataclass(frozen=True)
class SortData(TextPairSettings):
    vocab_type: str = "symbols"
    n_train: int = 3000
    n_valid: int = 40
    max_numbers: int = 4  # each list holds 2..max_numbers numbers from 0..9


def sorted_exact(outputs: list[str], refs: list[list[str]]) -> float:
    """Per cent of outputs that are exactly their sorted list."""
    return 100.0 * sum(o.split() == r[0].split() for o, r in zip(outputs, refs)) / max(len(outputs), 1)


class SortPipeline(TextPipeline):
    task, metric = NAME, "sorted_exact"
    routes = "sort_task:ROUTES"
    lines = "sort_task:LINES"

    def source(self, numbers) -> str:
        return " ".join(str(n) for n in numbers)

    def score(self, texts: list[str], refs: list[list[str]], **kwargs) -> dict:
        value = sorted_exact(texts, refs)
        return {"metric": self.metric, "sorted_exact": value, "sorted_exact_signature": "exact list match %",
                "sorted_exact_detail": f"sorted exactly: {value:.1f}%"}


class SortRequest(Body):
    """{"numbers": [3, 1, 2]}: digits 0..9."""

    numbers: Annotated[list[Annotated[int, Field(ge=0, le=9)]], Field(min_length=1)]


async def sort(pipeline: SortPipeline, r: SortRequest, server) -> dict:
    """-> {"sorted": [1, 2, 3]}."""
    text = (await server.decode(pipeline.prepare([r.numbers]), method="greedy"))[0]
    return {"sorted": [int(w) for w in text.split() if w.isdigit()]}


ROUTES = (Route("POST", "/v1/sort", sort, "sort a list of numbers", SortRequest),)
LINES = LineFormat(parse=lambda line: [int(word) for word in line.split()])  # "3 1 2" -> [3, 1, 2]


class SortTask(Seq2SeqTask):
    name = NAME
    data_config = SortData
    pipeline = SortPipeline

    def examples(self, split: str) -> Examples:
        n = self.data.n_train if split == self.data.train_split else self.data.n_valid
        rng = random.Random(f"{self.cfg.train.seed}:{split}")
        lists = [[rng.randrange(10) for _ in range(rng.randint(2, self.data.max_numbers))] for _ in range(n)]
        return Examples([" ".join(map(str, x)) for x in lists], [[" ".join(map(str, sorted(x)))] for x in lists])

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        return {"sorted_exact": sorted_exact(hyps, examples.refs)}

"""Tasks: what a job reads, learns, measures and answers (`base.Task`), and the one inference door
to each (`pipeline.Pipeline`, through `load_pipeline`).

A recipe names its task with a top-level `task = "..."`:
    a built-in name     translation, summarization, qa (the text-to-text tasks of `seq2seq`),
                        lm (decoder-only), classify, mlm and embed (encoder-only), image-classify (ViT)
    an import path      "package.module:TaskClass", for a task defined outside aiayn
    an entry point      a name in the `aiayn.tasks` entry-point group of an installed package

The registry below is the only list of built-in tasks: adding one is a module and a line here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from aiayn.config import ConfigError
from aiayn.model_dir import DEFAULT_TASK, read_task_info, task_of, write_task_info
from aiayn.tasks.pipeline import Pipeline, RequestError  # what every door speaks

TASKS: Mapping[str, str] = MappingProxyType({  # name -> "module:class", imported on first use
    "translation": "aiayn.tasks.translation:TranslationTask",
    "summarization": "aiayn.tasks.summarization:SummarizationTask",
    "qa": "aiayn.tasks.qa:QATask",
    "lm": "aiayn.tasks.lm:LMTask",
    "classify": "aiayn.tasks.classify:ClassifyTask",
    "mlm": "aiayn.tasks.mlm:MLMTask",
    "embed": "aiayn.tasks.embed:EmbedTask",
    "image-classify": "aiayn.tasks.vision:ImageClassifyTask",
})
ENTRY_POINT_GROUP = "aiayn.tasks"


def task_class(name: str) -> type:
    """The task class `name` stands for: a built-in name, an `aiayn.tasks` entry point, or an
    import path "module:Class". Errors list the built-in names."""
    path = TASKS.get(name) or _entry_point(name) or (name if ":" in name else None)
    if path is None:
        raise ConfigError(f"unknown task {name!r}; built in: {', '.join(TASKS)} (or an import path 'module:Class')")
    module, _, attribute = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"task {name!r}: cannot import {path} ({e})") from None
    for member in ("data_config", "pipeline", "prepare", "loss"):
        if not hasattr(cls, member):
            raise ConfigError(f"task {name!r}: {path} is not a task (it has no {member!r}; see aiayn.tasks.base.Task)")
    return cls


def _entry_point(name: str) -> str | None:
    from importlib.metadata import entry_points

    found = [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    return found[0] if found else None


def build_task(cfg):
    """The task a `TrainConfig` names, set up with it."""
    return task_class(cfg.task)(cfg)


def load_pipeline(model_dir: str | Path, device="cpu", backend: str = "native", **options):
    """The inference door of a model directory: its task's `Pipeline`, set up as its task.json says
    (decoding defaults, how long inputs are cut); `options` that are not None win over task.json.
    A task.json whose task cannot drive the directory's model type (e.g. copied from another model by
    `aiayn average --task-from`) is an error naming it, before the model is loaded.
    `backend`: "native" (aiayn's own decoder) or one the pipeline lists in `backends`."""
    task = task_of(model_dir)
    pipeline = task_class(task).pipeline
    if backend not in pipeline.backends:
        raise ValueError(f"{model_dir}: a {task} model runs on the {' or '.join(pipeline.backends)} backend, not {backend}")
    pipeline.check_model_type(model_dir, task)
    options = {k: v for k, v in options.items() if v is not None}  # None: as task.json says
    foreign = sorted(k for k in options if k not in pipeline.load_options)
    if foreign:
        takes = f"it takes {', '.join(pipeline.load_options)}" if pipeline.load_options else "it takes none"
        raise ValueError(f"{model_dir}: a {task} model has no {' or '.join(foreign)} option ({takes})")
    if backend != "native":
        options["backend"] = backend
    return pipeline.from_pretrained(model_dir, device=device, **options)


__all__ = ["TASKS", "DEFAULT_TASK", "task_class", "build_task", "task_of", "load_pipeline", "Pipeline",
           "RequestError", "read_task_info", "write_task_info"]

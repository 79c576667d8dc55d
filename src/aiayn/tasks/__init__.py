"""Tasks: translation, summarization and question answering (the text-to-text tasks of
`seq2seq`), language modelling (`lm`, a decoder-only model), and classification and masked-LM
pre-training (`classify`, `mlm`, an encoder-only model); see `base.Task`. A
recipe names its task with a top-level `task = "..."` (default "translation")."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from aiayn.config import ConfigError
from aiayn.tasks.base import Task
from aiayn.tasks.classify import ClassifyTask, MLMTask
from aiayn.tasks.lm import LMTask
from aiayn.tasks.qa import QATask
from aiayn.tasks.summarization import SummarizationTask
from aiayn.tasks.translation import TranslationTask
from aiayn.tasks.vision import ImageClassifyTask

TASKS: Mapping[str, type] = MappingProxyType({t.name: t for t in (TranslationTask, SummarizationTask, QATask, LMTask, ClassifyTask, MLMTask, ImageClassifyTask)})
DEFAULT_TASK = TranslationTask.name


def build_task(cfg) -> Task:
    """The task a `TrainConfig` names."""
    if cfg.task not in TASKS:
        raise ConfigError(f"unknown task {cfg.task!r}; known: {', '.join(TASKS)}")
    return TASKS[cfg.task](cfg)


__all__ = ["TASKS", "DEFAULT_TASK", "Task", "TranslationTask", "SummarizationTask", "QATask", "LMTask", "ClassifyTask", "MLMTask", "ImageClassifyTask", "build_task"]

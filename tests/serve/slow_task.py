"""A translation task whose every decoding call takes `SLOW_S` longer: a server with more queued work than
its shutdown window, for the SIGTERM test. A model directory names it in task.json ("slow_task:SlowTask")."""

import time

from aiayn.tasks.translation import TranslationPipeline, TranslationTask

NAME, SLOW_S = "slow_task:SlowTask", 0.3


class SlowPipeline(TranslationPipeline):
    task = NAME

    def run(self, sources, progress=None, **options):
        time.sleep(SLOW_S)
        return super().run(sources, progress=progress, **options)


class SlowTask(TranslationTask):
    name = NAME
    pipeline = SlowPipeline

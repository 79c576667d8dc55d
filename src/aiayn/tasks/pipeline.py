"""The one inference door of a task: everything the CLI, `aiayn evaluate --model`, `aiayn serve`
and `aiayn plot` need of a model directory, so that it answers the same through each of them.

    inputs  --prepare-->  model items  --run-->  outputs          pipeline(inputs) does both
    evaluate       text(output) -> what `score(texts, refs)` measures with the task's `metric`
    the CLI        `lines` names its line format in `aiayn.commands.lines` (how a line becomes an
                   input and an output a line)
    HTTP           `routes` names the module of its routes in `aiayn.serve.routes`, whose handlers
                   call these methods; the server batches their items into `run` calls
    plot           attention(input) -> a picture's data (with `draw` and `describe`)

`prepare` is cheap (it runs where a request arrives); `run` holds the model work, so a server
batches the items of several requests into one `run` call, or a continuous `session`.
`aiayn.tasks.load_pipeline(model_dir)` picks the pipeline from the directory's task.json.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Iterator, Optional, Sequence

from aiayn.metrics import SCORERS
from aiayn.model_dir import TASK_FILE
from aiayn.models import CONFIG_FILE, read_config


class RequestError(ValueError):
    """Input a door cannot take. HTTP answers `status` with the message; the CLI prints it."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class Pipeline:
    """Base of every task's door; a subclass sets the class attributes and `from_pretrained`/`run`."""

    task: ClassVar[str] = ""  # the task name in task.json
    command: ClassVar[str] = ""  # the `aiayn` command that answers with this pipeline
    metric: ClassVar[str] = ""  # a `metrics.SCORERS` name for `aiayn evaluate --model`; "" = none
    routes: ClassVar[str] = ""  # "module:NAME" of the HTTP routes that serve offers for it (`aiayn.serve.routes`)
    lines: ClassVar[str] = ""  # "module:NAME" of its CLI line format (`aiayn.commands.lines`); "" = text lines
    backends: ClassVar[tuple[str, ...]] = ("native",)  # what `load_pipeline(..., backend=)` may ask for
    # what `from_pretrained` (and `load_pipeline`) take beyond the directory, e.g. "precision", "quantize",
    # "max_input_tokens": any other option given is an error, never silently ignored
    load_options: ClassVar[tuple[str, ...]] = ()
    # the model types it drives (config.json's model_type: names in `aiayn.models.MODEL_TYPES`); a model
    # directory of another type is refused by `check_model_type`. () = not said: `from_pretrained` checks
    model_types: ClassVar[tuple[str, ...]] = ()
    reads_images: ClassVar[bool] = False  # its inputs are images (`attention` takes a test image's index), not text

    @classmethod
    def from_pretrained(cls, model_dir, device="cpu", **options) -> "Pipeline":
        raise NotImplementedError

    @classmethod
    def check_model_type(cls, model_dir, task: str) -> None:
        """A ValueError naming task.json, the task and the model type when the model in `model_dir` is
        not of `model_types`: its task.json was made for another model (e.g. `aiayn average --task-from`)."""
        if not cls.model_types:
            return
        from pathlib import Path

        try:
            model_type, _ = read_config(model_dir)
        except (OSError, ValueError):
            return  # not an aiayn model (a CTranslate2 export): the loader says what it is and what to do
        if model_type in cls.model_types:
            return
        if not (Path(model_dir) / TASK_FILE).is_file():  # read as the default task
            raise ValueError(f"{model_dir}: no {TASK_FILE}, so read as a {task} model, which is an "
                             f"{' or '.join(cls.model_types)} model; this one is {model_type} ({CONFIG_FILE})")
        raise ValueError(f"{Path(model_dir) / TASK_FILE}: task {task!r} drives {' or '.join(cls.model_types)} "
                         f"models, but the model of {model_dir} is {model_type} ({CONFIG_FILE}): this task.json "
                         "belongs to another model")

    def __call__(self, inputs: Sequence, progress: Optional[Callable[[int], None]] = None, **options) -> list:
        """Outputs for `inputs`, in order. `options` override the directory's settings for this call."""
        return self.run(self.prepare(inputs), progress=progress, **options)

    def prepare(self, inputs: Sequence) -> list:
        """Inputs -> what the model reads (e.g. `context [SEP] question`)."""
        return list(inputs)

    def run(self, items: list, progress: Optional[Callable[[int], None]] = None, **options) -> list:
        raise NotImplementedError

    def directions(self) -> tuple[tuple[str, str], ...]:
        """The (source, target) language pairs this pipeline translates; () = it is not chosen by
        language. A server holding several model directories lists them all (/languages)."""
        return ()

    def stream(self, item, **options) -> Iterator[str]:
        """The output of one model item as it is decoded, a piece (of text) at a time; joined, the
        pieces are what `run` gives for the item with these options. Pipelines that cannot stream
        refuse it with a RequestError."""
        raise RequestError(f"a {self.task} model does not stream its output", 400)

    def session(self, **options):
        """A continuous-batching session (see `aiayn.decoding.translator.ContinuousTranslation`) for
        these options, or None: the server then batches whole `run` calls."""
        return None

    # -- evaluate and plot -----------------------------------------------------------------------
    def text(self, output) -> str:
        """The text of an output that a metric scores."""
        return output

    def score(self, texts: list[str], refs: list[list[str]], **kwargs) -> dict:
        """The task's metric of `texts` against `refs` (one list of references per text)."""
        if not self.metric:
            raise ValueError(f"a {self.task} model has no metric for aiayn evaluate")
        return {"metric": self.metric, **SCORERS[self.metric](texts, refs, **kwargs)}

    def attention(self, given, **output_limits):
        """What `aiayn plot attention` draws for one input (as `prepare` takes it; a test image's index
        where `reads_images`): an object with `draw(part, layer, head, size)` and `describe()`;
        `output_limits` (max_len_a, max_len_b) bound what is generated."""
        raise ValueError(f"aiayn plot attention does not draw a {self.task} model")


class NoPipeline(Pipeline):
    """A task whose models are not used through a door of their own (e.g. MLM pre-training)."""

    use: ClassVar[str] = ""  # what to do with such a model instead

    @classmethod
    def from_pretrained(cls, model_dir, device="cpu", **options):
        raise ValueError(f"{model_dir}: a {cls.task} model has no inference door; {cls.use}")

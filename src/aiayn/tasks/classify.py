"""Text classification with the encoder-only model (BERT); its masked-language-model pre-training is `aiayn.tasks.mlm`.

    data        `ClassifyData`: `text<TAB>label` lines, `{corpus}/{split}.tsv[.gz]`; a first line
                whose label field is "label" is a header. A line without exactly one TAB is an
                error naming the file and line. An empty text is skipped, a text over
                `data.max_input_tokens` is cut, and a text longer than a whole batch
                (`data.max_tokens`) is skipped: each is counted (a warning, and test_scores.json).
                With `data.carve_fraction` > 0 the validation split is carved from the training
                file by `carve`: whole sentences and none of their phrases, so that checkpoints
                are chosen on sentences the model never trained on and the test split (e.g.
                SST-2's dev) is scored once, at the end.
    vocabulary  sentencepiece (or whitespace symbols) on the training texts, with "[MASK]" a piece
                of its own, so a classifier can start from an MLM model's directory
                (`train.init_from`) with the same vocabulary (`data.tokenizer = DIR`)
    classify    cross-entropy of the [CLS] head over the labels (sorted label strings of the
                training split; saved in task.json); validation and test: accuracy
    inference   `Classifier`: `aiayn classify`, POST /v1/classify
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, ClassVar, Mapping, Optional, Sequence

import numpy as np
import torch

from aiayn.config import PAD_ID, UNK_ID, ConfigError
from aiayn.data.batching import LazyBatches, TokenBucketSampler
from aiayn.data.corpus import CorpusError, read_lines
from aiayn.data.records import record_file
from aiayn.data.tokenizer import TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.decoding.attention_maps import self_attention_maps
from aiayn.decoding.common import input_tokens, pad_sources
from aiayn.distributed import DistInfo
from aiayn.model_dir import TASK_FILE, read_task_info, task_field, write_task_info
from aiayn.models import load_model, read_config
from aiayn.models.base import CONFIG_FILE, eval_mode
from aiayn.models.encoder_only import CLS_ID, EncoderOnly
from aiayn.tasks.base import Drops, run_tokenizers, write_test_scores
from aiayn.tasks.pipeline import Pipeline
from aiayn.tasks.seq2seq import build_tokenizers
from aiayn.tasks.settings import SplitSettings, VocabSettings, carved, carving, check_carve, check_positive

if TYPE_CHECKING:  # annotations only: training builds tasks
    from aiayn.training.config import TrainConfig

from aiayn.tasks.loss import LossSums, add_ponder_cost, class_smoothed_loss, ponder_weight

log = logging.getLogger(__name__)

MASK = "[MASK]"


def read_labelled(path: Path) -> tuple[list[str], list[str], int]:
    """(texts, labels, empty texts skipped) of a `text<TAB>label` file."""
    texts, labels, n_empty = [], [], 0
    for i, line in enumerate(read_lines(path, strip=False), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{i}: expected text<TAB>label, found {len(fields)} tab-separated fields")
        text, label = fields[0].strip(), fields[1].strip()
        if i == 1 and label == "label":
            continue  # a header
        if not label:
            raise CorpusError(f"{path}:{i}: empty label")
        if not text:
            n_empty += 1
            continue
        texts.append(text)
        labels.append(label)
    return texts, labels, n_empty


@dataclass
class TextBatch:
    """tokens (B, T) ids, PAD on the right; targets: (B,) label indices (classify) or (B, T)
    original ids at the masked positions and PAD elsewhere (mlm)."""

    tokens: torch.Tensor
    targets: torch.Tensor

    def to(self, device) -> "TextBatch":
        return TextBatch(self.tokens.to(device), self.targets.to(device))


def carve(texts: Sequence[str], fraction: float) -> tuple[list[int], list[int]]:
    """(training indices, carved indices) of a training file whose texts may be phrases of its
    other texts, as SST's: the phrase-level training file holds every labelled phrase of each
    training sentence (Socher et al., 2013). A carved text is a whole one (no word span of another
    text) whose hash falls under `fraction`, each distinct text once; a text that is a word span
    of a carved one leaves training, so no phrase of a held-out sentence is trained on. A hash,
    not a random draw: the same split in every run and on every machine."""
    spans = inner_texts(texts)
    held = {text for text in whole_texts(spans) if carved(f"carve:{text}", fraction)}
    gone = held.union(*(spans[text] for text in held))
    kept, seen = [], set()
    for i, text in enumerate(texts):
        if text in held and text not in seen:
            kept.append(i)
            seen.add(text)
    return [i for i, text in enumerate(texts) if text not in gone], kept


def inner_texts(texts: Sequence[str]) -> dict[str, set[str]]:
    """Each distinct text -> the texts of `texts` that are word spans of it (its labelled phrases, in SST)."""
    distinct = set(texts)
    return {text: word_spans(text) & distinct for text in distinct}


def whole_texts(inner: Mapping[str, set[str]]) -> set[str]:
    """The texts of `inner_texts` that are no word span of another: SST's whole sentences."""
    return set(inner).difference(*inner.values())


def word_spans(text: str) -> set[str]:
    """The proper contiguous word spans of `text` ("a b c" -> "a", "b", "c", "a b", "b c")."""
    words = text.split()
    n = len(words)
    return {" ".join(words[i:j]) for i in range(n) for j in range(i + 1, n + 1) if j - i < n}


@dataclass(frozen=True)
class ClassifyData(VocabSettings, SplitSettings):
    renamed: ClassVar[Mapping[str, Optional[str]]] = MappingProxyType({"max_length": "max_input_tokens"})
    max_input_tokens: int = 127  # longer texts are cut to this many tokens (counted), in training and inference;
    # at most the model's max_positions less one for [CLS] (the encoder-only default: 128)
    carve_fraction: float = 0.0  # > 0: valid_split is this share of the training file's whole texts (`carve`)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "max_input_tokens")
        check_carve(self)


def check_fits(max_input_tokens: int, max_positions: int) -> None:
    """Inputs cut to `max_input_tokens` fit a model of `max_positions` positions, one of them [CLS]'s."""
    if max_input_tokens > max_positions - 1:
        raise ConfigError(f"max_input_tokens {max_input_tokens} does not fit the model: its max_positions "
                          f"{max_positions} hold {max_positions - 1} tokens after [CLS]; cut the inputs shorter "
                          f"or give the model more positions")


def labels_of(info: dict, model_dir: str | Path) -> list[str]:
    """The class names in `model_dir`'s task.json (`info`): strings, one per class of the model's head
    (config.json's n_classes). Their absence, another type or another number is an error naming the file."""
    labels = task_field(info, model_dir, "labels", list, "the class names, a list")
    path = Path(model_dir) / TASK_FILE
    odd = [label for label in labels if not isinstance(label, str)]
    if odd:
        raise ValueError(f"{path}: labels must be strings (the class names), found {odd[0]!r}")
    n_classes = getattr(read_config(model_dir)[1], "n_classes", None)  # None: a model with no head (refused elsewhere)
    if n_classes is not None and len(labels) != n_classes:
        raise ValueError(f"{path}: labels names {len(labels)} class{'es' * (len(labels) != 1)} for a model of {n_classes} "
                         f"({CONFIG_FILE}'s n_classes); this task.json belongs to another model")
    return labels


def input_limit(info: dict, model_dir: str | Path, max_positions: int) -> int:
    """How many tokens a loaded classifier keeps of an input: task.json's max_input_tokens (max_length
    before the rename), refused with the file's name when the model cannot hold it; without either, the
    training default (`ClassifyData.max_input_tokens`) where the model holds it, else all the model holds."""
    path = Path(model_dir) / TASK_FILE
    for key in ("max_input_tokens", "max_length"):
        if key in info:
            value = info[key]
            if type(value) is not int or value < 1:
                raise ValueError(f"{path}: {key} must be a whole number of at least 1, got {value!r}")
            try:
                check_fits(value, max_positions)
            except ConfigError as e:
                said = f" ({key}, its earlier name)" if key != "max_input_tokens" else ""
                raise ConfigError(f"{path}: {e}{said}") from None
            return value
    limit = min(ClassifyData.max_input_tokens, max_positions - 1)
    log.warning("%s has no max_input_tokens: inputs are cut to %d tokens (%s)", path, limit,
                "the training default" if limit == ClassifyData.max_input_tokens else "all the model's positions hold")
    return limit


def text_inputs(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """The encoder inputs of `texts`: their tokens (`input_tokens`), cut to `max_length` as in training
    (one warning counts the cut ones)."""
    ids = [input_tokens(tokenizer, t) for t in texts]
    cut = sum(len(x) > max_length for x in ids)
    if cut:
        log.warning("%d of %d texts cut to %d tokens", cut, len(ids), max_length)
    return [x[:max_length] or [UNK_ID] for x in ids]


class Classifier(Pipeline):
    """`Classifier.from_pretrained(DIR).classify(texts)` (or `load_pipeline(DIR)(texts)`) ->
    [(label, probability)] per text. A CLI output line is `label<TAB>probability`."""

    task, command, metric = "classify", "classify", "accuracy"
    routes = "aiayn.serve.routes.classify:ROUTES"
    lines = "aiayn.commands.lines:LABELS"
    load_options = ("max_input_tokens",)
    model_types = (EncoderOnly.model_type,)

    def __init__(self, model, tokenizer, labels: list[str], max_length: int):
        if type(max_length) is not int or max_length < 1:
            raise ValueError(f"max_input_tokens must be a whole number of at least 1, got {max_length!r}")
        check_fits(max_length, model.config.max_positions)
        self.model, self.tokenizer, self.labels, self.max_length = model.eval(), tokenizer, labels, max_length

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu",
                        max_input_tokens: int | None = None) -> "Classifier":
        """`max_input_tokens`, when not None, wins over task.json's."""
        info = read_task_info(model_dir, expect=cls.task)
        labels = labels_of(info, model_dir)
        model = load_model(model_dir, device=device)
        limit = input_limit(info, model_dir, model.config.max_positions) if max_input_tokens is None else max_input_tokens
        return cls(model, load_tokenizers(model_dir).src, labels, limit)

    def run(self, texts: list[str], progress=None, batch_size: int = 64, **options) -> list[tuple[str, float]]:
        refuse_options(self.task, options)
        return self.decide(self.inputs(texts), progress, batch_size)

    def inputs(self, texts: Sequence[str]) -> list[list[int]]:
        return text_inputs(self.tokenizer, texts, self.max_length)

    def decide(self, inputs: list, progress=None, batch_size: int = 64) -> list[tuple[str, float]]:
        """(label, probability) of each model input (token ids, or patches), `batch_size` at a time."""
        probs = self.probabilities(inputs, progress, batch_size)
        return [(self.labels[int(i)], float(p[i])) for i, p in zip(probs.argmax(-1), probs)]

    @torch.inference_mode()
    def probabilities(self, inputs: list, progress=None, batch_size: int = 64) -> torch.Tensor:
        """The class probabilities (N, n_classes) of model inputs, float32, `batch_size` at a time."""
        device = next(self.model.parameters()).device
        out = []
        for start in range(0, len(inputs), batch_size):
            out.append(self.model.classify(self.batch(inputs[start:start + batch_size], device)).float().softmax(-1).cpu())
            if progress is not None:
                progress(len(out[-1]))
        return torch.cat(out) if out else torch.zeros(0, len(self.labels))

    def batch(self, inputs: list, device) -> torch.Tensor:
        return pad_sources(inputs, PAD_ID, device)  # (B, T)

    def classify(self, texts: Sequence[str], batch_size: int = 64) -> list[tuple[str, float]]:
        return self.run(list(texts), batch_size=batch_size)

    def text(self, output) -> str:
        return output[0]

    def attention(self, text: str, **output_limits):  # nothing is generated: no output limits apply
        """The bidirectional self-attention over `text`, [CLS] first."""
        return self_attention_maps(self.model, self.tokenizer, text.strip(), "encoder", first=[("[CLS]", CLS_ID)])


def refuse_options(task: str, options: dict) -> None:
    if options:
        raise ValueError(f"a {task} model takes no decoding options; got {', '.join(sorted(options))}")


class ClassifyTask:
    name = "classify"
    metrics = ("accuracy",)
    data_config = ClassifyData
    pipeline = Classifier
    unused_parameters = True  # the encoder-only model's other head gets no gradient (`distributed.wrap_ddp`)

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.data = cfg, cfg.data
        self.check_input_length()
        self.tokenizers: Optional[TokenizerPair] = None
        self.labels: list[str] = []
        self.splits: dict[str, tuple[list[list[int]], list[int]]] = {}
        self.drops = Drops()
        self._carved: Optional[tuple] = None  # with data.carve_fraction: (texts, labels, n_empty, train, held)

    def check_input_length(self) -> None:
        """data.max_input_tokens fits the model: refused now, not at the first long text, updates in."""
        check_fits(self.data.max_input_tokens, self.cfg.model.build(64, 64).max_positions)

    # -- data -----------------------------------------------------------------------------------
    def read(self, split: str) -> tuple[list[str], list[str]]:
        """(texts, labels) of `split`; with a carve, the training and validation splits divide the
        training file (`carve`)."""
        data = self.data
        carved_now = carving(data, split)
        path = record_file(data.corpus, data.train_split if carved_now else split, (".tsv", ".tsv.gz"))
        if carved_now and self._carved is not None:  # both splits come from one reading and one carve
            texts, labels, n_empty, train, held = self._carved
        else:
            texts, labels, n_empty = read_labelled(path)
            if carved_now:
                train, held = carve(texts, data.carve_fraction)
                self._carved = texts, labels, n_empty, train, held
                log.info("carved %s: %d training texts, %d held out as %s, %d phrases of them dropped", path,
                         len(train), len(held), data.valid_split, len(texts) - len(train) - len(held))
        if not (carved_now and split == data.valid_split):  # the file's empty texts, counted once: in training
            self.drops.note(split, "empty", n_empty, n_empty + len(texts), f"{path}: empty texts")
        if not carved_now:
            return texts, labels
        self._note_carve(split, path, texts, train, held)
        keep = held if split == data.valid_split else train
        return [texts[i] for i in keep], [labels[i] for i in keep]

    def _note_carve(self, split: str, path: Path, texts: list[str], train: list[int], held: list[int]) -> None:
        """What the carve leaves out of both splits, counted: the phrases of held-out sentences (out of
        training) and the copies of a held-out sentence beyond its first (out of validation)."""
        held_texts = {texts[i] for i in held}
        copies = sum(text in held_texts for text in texts)  # the held-out sentences with their copies
        if split == self.data.valid_split:
            self.drops.note(split, "duplicate", copies - len(held), copies, f"{path}: copies of held-out texts")
        else:
            self.drops.note(split, "phrase_of_held_out", len(texts) - len(train) - copies, len(texts),
                            f"{path}: phrases of the texts held out as {self.data.valid_split}")

    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        t, data = time.monotonic(), self.data
        texts, labels = self.read(data.train_split)
        self.labels = sorted(set(labels))
        self.tokenizers = run_tokenizers(self.data, run_dir, dist, fresh, lambda: build_tokenizers(
            self.data, texts, [], self.cfg.train.seed, (MASK,)))
        self.splits[data.train_split] = self.encode(data.train_split, texts, labels)
        for split in filter(None, (data.valid_split, data.test_split)):
            self.splits[split] = self.encode(split, *self.read(split))
        log.info("data ready in %.1f s: %d training texts, labels %s", time.monotonic() - t,
                 len(self.splits[data.train_split][0]), self.labels)

    def encode(self, split: str, texts: list[str], labels: list[str]) -> tuple[list[list[int]], list[int]]:
        """(token ids cut to data.max_length, label indices) of one split's texts."""
        unknown = sorted(set(labels) - set(self.labels))
        if unknown:
            raise CorpusError(f"{self.data.corpus} split {split!r}: labels {unknown} never occur in training")
        return self.token_ids(split, texts), [self.labels.index(y) for y in labels]

    def token_ids(self, split: str, texts: list[str]) -> list[list[int]]:
        """The token ids of `texts`, each cut to data.max_input_tokens (the cut ones counted under `split`)."""
        limit = self.data.max_input_tokens
        ids = self.tokenizers.src.encode_batch(texts)
        self.drops.note(split, "truncated", sum(len(s) > limit for s in ids), len(ids), f"texts over {limit} tokens")
        return [s[:limit] for s in ids]

    def restore(self, model_dir: Path) -> None:
        """Labels and vocabulary from a finished model directory, and the test split (for `test`)."""
        self.labels = labels_of(read_task_info(model_dir, expect=self.name), model_dir)
        self.tokenizers = load_tokenizers(model_dir)
        self.splits[self.data.test_split] = self.encode(self.data.test_split, *self.read(self.data.test_split))

    def model_spec(self):
        """`[model] type = "encoder-only"`, with a head for the labels."""
        size = self.tokenizers.src.vocab_size
        return self.cfg.model.type, self.cfg.model.build(size, size, n_classes=self.n_classes())

    def n_classes(self) -> int:
        return len(self.labels)

    def batches(self, split: str, epoch: int, dist: Optional[DistInfo], shuffle: bool) -> list[list[int]]:
        ids, _ = self.splits[split]
        lengths = np.array([len(s) + 1 for s in ids])
        self.drops.note(split, "skipped", int((lengths > self.data.max_tokens).sum()), len(ids),
                        f"longer than a batch of data.max_tokens = {self.data.max_tokens}")
        sampler = TokenBucketSampler(lengths, np.zeros(len(ids), dtype=np.int64),
                                     self.data.max_tokens, seed=self.cfg.train.seed, shuffle=shuffle,
                                     rank=dist.rank if dist else 0, world_size=dist.world_size if dist else 1,
                                     skip_overlong=True)
        return sampler.batches(epoch)

    def collate(self, split: str, indices: Sequence[int], epoch: int = 0, number: int = 0) -> TextBatch:
        ids, labels = self.splits[split]
        return TextBatch(pad_sources([ids[i] for i in indices], PAD_ID), torch.tensor([labels[i] for i in indices]))

    def train_data(self, dist: DistInfo) -> Callable[[int], list[TextBatch]]:
        split = self.data.train_split

        def epoch_batches(epoch: int) -> LazyBatches:
            batches = self.batches(split, epoch, dist, True)
            return LazyBatches(len(batches), lambda n: self.collate(split, batches[n], epoch, n))
        return epoch_batches

    def valid_data(self) -> Optional[list[TextBatch]]:
        split = self.data.valid_split
        if not split:
            return None
        return [self.collate(split, b, 0, n) for n, b in enumerate(self.batches(split, 0, None, False))]

    # -- training -------------------------------------------------------------------------------
    def loss(self, model, batch: TextBatch) -> LossSums:
        scores, ponder = model(batch.tokens, head="classify", with_ponder=True)  # through forward, for DDP
        sums = class_smoothed_loss(scores, batch.targets, self.cfg.optim.label_smoothing)  # scores (B, C)
        return add_ponder_cost(sums, ponder, ponder_weight(model))

    def n_targets(self, batch: TextBatch) -> int:
        return batch.targets.numel()

    # -- validation, test, inference ------------------------------------------------------------
    @torch.inference_mode()
    def accuracy(self, model, split: str) -> float:
        device = next(model.parameters()).device
        right = total = 0  # over the examples batched: `batches` counts the ones it skips
        with eval_mode(model):
            for n, b in enumerate(self.batches(split, 0, None, False)):
                batch = self.collate(split, b, 0, n).to(device)
                right += int((model.classify(batch.tokens).argmax(-1) == batch.targets).sum())
                total += len(b)
        return 100.0 * right / max(total, 1)

    def validate(self, model) -> dict[str, float]:
        return {"accuracy": self.accuracy(model, self.data.valid_split)} if self.data.valid_split else {}

    def test(self, model_dir: Path, device, progress=None) -> Optional[dict]:
        if not self.data.test_split:
            return None

        t = time.monotonic()
        if self.data.test_split not in self.splits:
            self.restore(Path(model_dir))
        split = self.data.test_split
        acc = self.accuracy(load_model(model_dir, device=device), split)
        dropped = self.drops.of(split)
        result = {"split": split, "accuracy": acc, "signature": "accuracy %, argmax of the [CLS] head",
                  "n_examples": len(self.splits[split][1]) - dropped.get("skipped", 0), "dropped": dropped,
                  "dropped_elsewhere": self.drops.besides(split),
                  "seconds": time.monotonic() - t, "detail": f"accuracy {acc:.2f}%"}
        write_test_scores(model_dir, result)
        return result

    def save_extras(self, model_dir: Path) -> None:
        save_tokenizers(self.tokenizers, model_dir)
        write_task_info(model_dir, {"task": self.name, "labels": self.labels, "max_input_tokens": self.data.max_input_tokens})

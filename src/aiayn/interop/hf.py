"""`aiayn import hf SRC OUT` and `aiayn export hf MODEL_DIR OUT`: Hugging Face checkpoints in and out.

    import_hf(src, out)        a Hugging Face model directory, or a Hub name -> an aiayn model directory
    export_hf(model_dir, out)  an aiayn model directory -> what `transformers` loads with from_pretrained

One family module per architecture (`interop.marian`, `.gpt2`, `.bert`, `.vit`) holds its weight
table, its tokenizer and its options; this module picks it and writes the directories, each beside
its destination and renamed into place at the end. Only an earlier output of the same command is
replaced there: an import (its task.json says `imported_from`) or an export (`EXPORT_MARK`); any other
non-empty directory, a trained model or a downloaded checkpoint, is an error. Neither direction needs `transformers`:
weights are safetensors, configs JSON, tokenizers sentencepiece or the `tokenizers` library.

    Marian   MarianMTModel                                <-> encoder-decoder, task translation
    GPT-2    GPT2LMHeadModel                              <-> decoder-only, task lm
    BERT     BertForSequenceClassification, BertForMaskedLM <-> encoder-only (tokens), task classify / mlm
             BertModel, BertForPreTraining (body)          <-> encoder-only (tokens), task embed
    ViT      ViTForImageClassification                    <-> encoder-only (patches), task image-classify
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from aiayn import __version__
from aiayn.config import ConfigError
from aiayn.data.tokenizer import MANIFEST, load_tokenizers, save_tokenizers
from aiayn.decoding.translator import check_vocab
from aiayn.interop.checkpoint import Checkpoint, Unsupported, json_file, load_params
from aiayn.io import atomic_dir, atomic_write, check_replaceable, read_json_object
from aiayn.model_dir import read_task_info, write_task_info
from aiayn.models import CONFIG_FILE, Transformer, build_model, is_model_dir, load_model

log = logging.getLogger(__name__)

EXPORT_MARK = "aiayn_export.json"  # in an exported directory: what it came from (transformers ignores it)

# Hugging Face's model_type -> the module that maps it; its `exports(model)` says which of ours it maps back
FAMILIES = {"marian": "aiayn.interop.marian", "gpt2": "aiayn.interop.gpt2", "bert": "aiayn.interop.bert",
            "vit": "aiayn.interop.vit"}


# What a Hub download fetches: configs, safetensors weights, tokenizers. Never a pickle (*.bin, *.pt, *.ckpt).
HUB_FILES = ("*.json", "*.safetensors", "*.spm", "*.model", "*.txt")


def import_hf(src: str | Path, out: str | Path) -> Path:
    """Convert the Hugging Face model `src` into the aiayn model directory `out`: a local directory, or a
    Hub name (`Helsinki-NLP/opus-mt-de-en`) fetched first (`fetch_from_hub`)."""
    src = src if Path(src).exists() else fetch_from_hub(str(src))
    ckpt = Checkpoint(src)
    kind = ckpt.field("model_type")
    if kind not in FAMILIES:
        raise ckpt.refuse("model_type", kind, f"aiayn imports {', '.join(FAMILIES)}")
    try:
        imported = importlib.import_module(FAMILIES[kind]).import_checkpoint(ckpt)
    except ConfigError as e:  # a value of config.json that aiayn's model config refuses
        raise Unsupported(f"{ckpt.directory / CONFIG_FILE}: {e}") from None
    model = build_model(imported.model_type, imported.config)
    load_params(model, imported.params, ckpt, imported.ignored)
    if imported.model_type == Transformer.model_type:
        check_vocab(imported.config, imported.tokenizers, str(src))

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if imported.tokenizers is not None:
            save_tokenizers(imported.tokenizers, tmp)
        write_task_info(tmp, imported.task_info)

    _write_dir(Path(out), write, is_import, "an earlier import (an aiayn model directory with imported_from)", src)
    log.info("imported %s (%s) to %s", src, kind, out)
    return Path(out)


def fetch_from_hub(name: str) -> Path:
    """The snapshot of Hub model `name` in the user's Hugging Face cache (`HF_HUB_CACHE`, `HF_HOME`), downloaded
    by `huggingface_hub.snapshot_download` when missing: its configs, safetensors weights and tokenizer
    files only (`HUB_FILES`), never a pickle. With `HF_HUB_OFFLINE=1` the cache alone is read. A name that
    is no local path and no Hub name, one the Hub does not know, or one neither cached nor reachable is an
    error saying which."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError
        from huggingface_hub.utils import validate_repo_id
    except ImportError:
        raise FileNotFoundError(f"{name}: no such directory (a Hub name needs huggingface_hub: "
                                "pip install 'aiayn[hf]')") from None
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise FileNotFoundError(f"{name}: no such directory, nor a Hugging Face Hub name (ORG/NAME)") from None
    try:
        found = Path(snapshot_download(name, allow_patterns=list(HUB_FILES)))
    except RepositoryNotFoundError:
        raise FileNotFoundError(f"{name}: no such directory, and the Hugging Face Hub has no model of that name "
                                "(or it is private: log in with `hf auth login`)") from None
    except LocalEntryNotFoundError:
        raise FileNotFoundError(f"{name}: not in the Hugging Face cache, and the Hub cannot be reached (offline, "
                                "or HF_HUB_OFFLINE=1): fetch it where there is a network, or give a local "
                                "directory") from None
    log.info("%s: the Hub's snapshot %s", name, found)
    return found


def export_hf(model_dir: str | Path, out: str | Path) -> Path:
    """Convert the aiayn model directory `model_dir` into a Hugging Face model directory `out`."""
    from safetensors.torch import save_file

    model_dir = Path(model_dir)
    info = read_task_info(model_dir)
    model = load_model(model_dir)
    tokenizers = load_tokenizers(model_dir) if (model_dir / MANIFEST).is_file() else None
    exported = _family_of(model, model_dir).export_model(model, tokenizers, info, str(model_dir))

    def write(tmp: Path) -> None:
        for name, data in exported.files.items():
            with atomic_write(tmp / name) as f:
                f.write_bytes(data)
        with atomic_write(tmp / "model.safetensors") as f:
            save_file(exported.tensors, str(f), metadata={"format": "pt"})
        with atomic_write(tmp / EXPORT_MARK) as f:
            f.write_bytes(json_file({"format": "hf", "source": str(model_dir.resolve()), "aiayn_version": __version__}))
        with atomic_write(tmp / "config.json") as f:  # last: a directory with its config is complete
            f.write_bytes(json_file(exported.config))

    _write_dir(Path(out), write, is_export, f"an earlier export (a Hugging Face model directory with {EXPORT_MARK})",
               model_dir)
    log.info("exported %s to %s (Hugging Face %s)", model_dir, out, exported.config["architectures"][0])
    return Path(out)


def _family_of(model, model_dir: Path):
    family = next((m for m in map(importlib.import_module, FAMILIES.values()) if m.exports(model)), None)
    if family is None:
        raise Unsupported(f"{model_dir / CONFIG_FILE}: a {model.model_type!r} model has no Hugging Face counterpart "
                          "(encoder-decoder, decoder-only and encoder-only export)")
    if getattr(model.config, "universal", False):
        raise Unsupported(f"{model_dir / CONFIG_FILE}: recurrence = 'universal' (one layer applied again and again) "
                          "has no Hugging Face counterpart")
    return family


def is_hf_dir(directory: Path) -> bool:
    """Whether `directory` holds a Hugging Face model: a config.json that lists its "architectures"."""
    try:
        return isinstance(read_json_object(directory / "config.json").get("architectures"), list)
    except (OSError, ValueError):
        return False


def is_import(directory: Path) -> bool:
    """Whether `directory` is an earlier `import_hf`'s output: an aiayn model whose task.json says where from."""
    try:
        return is_model_dir(directory) and "imported_from" in read_task_info(directory)
    except (OSError, ValueError):
        return False


def is_export(directory: Path) -> bool:
    """Whether `directory` is an earlier `export_hf`'s output: a Hugging Face model with `EXPORT_MARK`."""
    return is_hf_dir(directory) and (directory / EXPORT_MARK).is_file()


def _write_dir(out: Path, write, ours, kind: str, src: str | Path) -> None:
    """`write(tmp)` fills a directory beside `out`, which then replaces `out`: absent, empty, or an earlier
    output of this `kind` (`ours`); anything else there, or `src` itself, is an error."""
    check_replaceable(out, ours, kind, [src])
    with atomic_dir(out) as tmp:
        write(tmp)

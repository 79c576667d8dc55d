"""Regenerate the pictures in docs/images/ (run from the repository root).

    .venv/bin/python docs/make_images.py                       # model-free pictures + demo model
    .venv/bin/python docs/make_images.py --demo-model runs/demo/model \\
        --multi30k-model runs/multi30k/model --multi30k-run runs/multi30k

Without --demo-model a reverse-task demo model is trained first (`aiayn.demo.run_demo`,
a few minutes on a CPU). Multi30k pictures are drawn only when their model/run is given.
Every picture is also a `aiayn plot ...` command; this script just fixes the arguments.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from aiayn import plots

DOCS = Path(__file__).resolve().parent
SIZE = (900, 600)
DEMO_SENTENCE = "a b c d e f g h"
MULTI30K_SENTENCE = "Two young men are playing soccer in a park ."
log = logging.getLogger("make_images")


def save(fig, name: str, out: Path) -> None:
    path = plots.save_png(fig, out / name)
    print(f"{path}  {path.stat().st_size / 1024:.0f} KB")


def model_free(out: Path) -> None:
    save(plots.plot_positional(length=100, d_model=128, size=SIZE)[0], "positional.png", out)
    save(plots.plot_masks(lengths=(5, 3, 7), tgt_len=6, size=(900, 380))[0], "masks.png", out)
    save(plots.plot_schedule(size=SIZE)[0], "schedule.png", out)
    save(plots.plot_scaling(size=SIZE)[0], "scaling.png", out)


def attention(model_dir: Path, sentence: str, prefix: str, out: Path) -> None:
    maps = plots.attention_for_sentence(model_dir, sentence)
    print(f"{prefix}: {' '.join(maps.src_labels)} -> {' '.join(maps.out_labels)}")
    last = maps.cross.shape[0] - 1
    save(plots.plot_attention(maps, "cross", layer=last, size=SIZE)[0], f"{prefix}_cross.png", out)
    save(plots.plot_attention(maps, "all", layer=last, head=0, size=(900, 340))[0], f"{prefix}_all_parts.png", out)


def demo_model(given: str | None, work: Path) -> Path:
    if given:
        return Path(given)
    from aiayn.demo import DemoConfig, run_demo

    log.info("training the reverse-task demo model (pass --demo-model to reuse one)")
    return run_demo(work / "demo", DemoConfig(task="reverse"), progress=False).model_dir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DOCS / "images"))
    p.add_argument("--demo-model", help="a reverse-task model directory (default: train one)")
    p.add_argument("--multi30k-model", help="a Multi30k en-de model directory")
    p.add_argument("--multi30k-run", help="the run directory of that model (metrics.jsonl)")
    p.add_argument("--skip-demo", action="store_true", help="only the model-free pictures (and Multi30k ones)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    model_free(out)
    with tempfile.TemporaryDirectory(prefix="aiayn-docs-") as work:
        if not args.skip_demo:
            attention(demo_model(args.demo_model, Path(work)), DEMO_SENTENCE, "attention_reverse", out)
    if args.multi30k_model:
        attention(Path(args.multi30k_model), MULTI30K_SENTENCE, "attention_multi30k", out)
    if args.multi30k_run:
        save(plots.plot_curves(args.multi30k_run, size=SIZE)[0], "curves_multi30k.png", out)


if __name__ == "__main__":
    main()

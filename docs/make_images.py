"""Regenerate the pictures in docs/images/ (run from the repository root).

    .venv/bin/python docs/make_images.py                       # model-free pictures + demo model
    .venv/bin/python docs/make_images.py --demo-model runs/demo/model --run demo=runs/demo \\
        --multi30k-model runs/multi30k-de-en/model --run multi30k=runs/multi30k-de-en

Without --demo-model a reverse-task demo model is trained first (`aiayn.commands.demo.run_demo`,
a few minutes on a CPU). Multi30k pictures are drawn only when their model is given;
`--run NAME=RUN_DIR` draws RUN_DIR/metrics.jsonl as images/curves_NAME.png.
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
MULTI30K_SENTENCE = "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun."  # test_2016_flickr #2
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
    """The last layer: cross-attention of all heads, and the three kinds for head 0. The model is
    reached through its pipeline, as `aiayn plot attention` reaches it (its task.json's settings)."""
    from aiayn.tasks import load_pipeline

    maps = load_pipeline(model_dir).attention(sentence)
    print(f"{prefix}: {' '.join(maps.src_labels)} -> {' '.join(maps.out_labels)}")
    scale = max(1.0, len(maps.src_labels) / 12)  # room for long subword sentences
    cross_size = (int(900 * scale), int(600 * scale))
    parts_size = (int(900 * scale), int(340 * scale))
    save(maps.draw("cross", size=cross_size)[0], f"{prefix}_cross.png", out)
    save(maps.draw("all", head=0, size=parts_size)[0], f"{prefix}_all_parts.png", out)


def demo_model(given: str | None, work: Path) -> Path:
    if given:
        return Path(given)
    from aiayn.commands.demo import run_demo

    log.info("training the reverse-task demo model (pass --demo-model to reuse one)")
    return run_demo(work / "demo", ['data.task="reverse"']).model_dir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DOCS / "images"))
    p.add_argument("--demo-model", help="a reverse-task model directory (default: train one)")
    p.add_argument("--multi30k-model", help="a Multi30k de-en model directory (recipes/multi30k-de-en.toml)")
    p.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR",
                   help="training curves of a run directory -> curves_NAME.png (repeatable)")
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
    for item in args.run:
        name, _, run_dir = item.partition("=")
        if not run_dir:
            p.error(f"--run expects NAME=RUN_DIR, got {item!r}")
        save(plots.plot_curves(run_dir, size=SIZE)[0], f"curves_{name}.png", out)


if __name__ == "__main__":
    main()

"""Other toolkits' checkpoints in and out of aiayn model directories (`aiayn import`, `aiayn export hf`).

    import_hf(src, out)        a Hugging Face model directory (Marian, GPT-2, BERT, ViT) -> aiayn's
    export_hf(model_dir, out)  aiayn's -> a directory `transformers` loads with from_pretrained

Heavy imports stay inside the functions, so importing this package is cheap.
"""

from __future__ import annotations

from aiayn.interop.hf import export_hf, import_hf

__all__ = ["export_hf", "import_hf"]

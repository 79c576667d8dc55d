"""Exporting aiayn models to other inference engines (`aiayn export`).

    export_ctranslate2(model_dir, out_dir, quantization)  a CTranslate2 model directory
                                                          (the optional `ct2` extra)
    CT2Translator.from_pretrained(out_dir)                 `Translator`'s interface on top of it
                                                          (`aiayn serve --backend ctranslate2`)

Heavy imports (torch, ctranslate2) stay inside the modules, so importing this package is cheap.
"""

from __future__ import annotations

from aiayn.export.ctranslate2 import MANIFEST, QUANTIZATIONS, export_ctranslate2

__all__ = ["MANIFEST", "QUANTIZATIONS", "export_ctranslate2"]

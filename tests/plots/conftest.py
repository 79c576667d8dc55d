from __future__ import annotations

import pytest

from plot_helpers import SYMBOLS, tiny_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A random tiny model with a symbol tokenizer, saved as a model directory."""
    import aiayn.data.tokenizer as tokenizer_mod  # imported, not skipped: an error in it is a failure
    directory = tmp_path_factory.mktemp("model")
    tiny_model().save_pretrained(directory)
    tok = tokenizer_mod.SymbolTokenizer(SYMBOLS)
    tokenizer_mod.save_tokenizers(tokenizer_mod.TokenizerPair.shared(tok), directory)
    return directory

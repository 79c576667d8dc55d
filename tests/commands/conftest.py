"""The tiny translation model directory the command tests decode with (symbols a..l, random weights)."""

import pytest
import torch

from aiayn.config import TransformerConfig
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.models.transformer import Transformer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tok = SymbolTokenizer([chr(ord("a") + i) for i in range(12)])
    path = tmp_path_factory.mktemp("model")
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=tok.vocab_size)).save_pretrained(path)
    save_tokenizers(TokenizerPair.shared(tok), path)
    return path

"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from aiayn.cache import KVCache
from aiayn.config import DecodeConfig, OptimConfig, TransformerConfig
from aiayn.model import DecoderOutput, EncoderOutput, Transformer, count_parameters

__version__ = "0.1.0"

__all__ = [
    "DecodeConfig", "DecoderOutput", "EncoderOutput", "KVCache", "OptimConfig", "Transformer",
    "TransformerConfig", "count_parameters", "__version__",
]

"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from aiayn.config import DecodeConfig, OptimConfig, SamplingConfig, TransformerConfig
from aiayn.models import Transformer, build_model, count_parameters, load_model
from aiayn.models.transformer import DecoderOutput, EncoderOutput
from aiayn.modules.cache import KVCache
from aiayn.tasks import load_pipeline

__version__ = "0.1.0"

__all__ = [
    "DecodeConfig", "DecoderOutput", "EncoderOutput", "KVCache", "OptimConfig", "SamplingConfig", "Transformer",
    "TransformerConfig", "build_model", "count_parameters", "load_model", "load_pipeline", "__version__",
]

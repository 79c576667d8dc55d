"""ViT (`ViTForImageClassification`, or the bare `ViTModel`: an encoder without a head, the start of an
image classifier through `train.init_from`) <-> aiayn's encoder-only model with patch inputs (task
image-classify).

ViT is the encoder, pre-norm with a final norm, over a learned [CLS] vector and linearly embedded
patches, with learned positions. Its patch embedding is a convolution with stride = kernel = patch;
on a patch flattened channel by channel, row by row (aiayn's `tasks.vision.patches` for one
channel), it is our linear map: the kernel (D, C, p, p) reshaped to (D, C·p·p).

The image-classify door reads one-channel images in [0, 1] of the model's size as they are: it
does not apply ViTImageProcessor's resizing and normalisation, and an export writes a
preprocessor_config.json that only rescales 8-bit pixels (0..255, as a PIL image has them) to [0, 1]. A checkpoint with more channels imports (the model
is exact on patches) but the door takes one-channel images only.
"""

from __future__ import annotations

import logging
import math

from aiayn.interop.checkpoint import (ACTIVATIONS_OUT, Checkpoint, Exported, Imported, Param, Unsupported,
                                      activation_in, attention, dump_params, json_file, linear, refuse_options)
from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig
from aiayn.tasks.vision import ImageClassifyTask

log = logging.getLogger(__name__)

ARCHITECTURE, BODY = "ViTForImageClassification", "ViTModel"


def params(cfg: EncoderOnlyConfig, channels: int, patch: int) -> list[Param]:
    e = "vit.embeddings"
    table = [Param("patch_proj.weight", (f"{e}.patch_embeddings.projection.weight",),
                   lambda ts: ts[0].reshape(ts[0].shape[0], -1),
                   lambda t: [t.reshape(t.shape[0], channels, patch, patch)]),  # (D, C, p, p) <-> (D, C·p·p)
             Param("patch_proj.bias", (f"{e}.patch_embeddings.projection.bias",), lambda ts: ts[0], lambda t: [t]),
             Param("cls", (f"{e}.cls_token",), lambda ts: ts[0], lambda t: [t]),
             Param("positions.weight", (f"{e}.position_embeddings",), lambda ts: ts[0][0], lambda t: [t[None]]),
             *linear("final_norm", "vit.layernorm")]
    if cfg.n_classes:
        table += linear("classifier", "classifier")
    for i in range(cfg.n_layers):
        a, h = f"layers.{i}", f"vit.encoder.layer.{i}"
        s = f"{h}.attention.attention"
        table += attention(f"{a}.self_attn", f"{s}.query", f"{s}.key", f"{s}.value", f"{h}.attention.output.dense")
        table += linear(f"{a}.sa_conn.norm", f"{h}.layernorm_before") + linear(f"{a}.ff_conn.norm", f"{h}.layernorm_after")
        table += linear(f"{a}.ff.linear1", f"{h}.intermediate.dense") + linear(f"{a}.ff.linear2", f"{h}.output.dense")
    return table


def _size(ckpt: Checkpoint, field: str) -> int:
    value = ckpt.field(field)
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise ckpt.refuse(field, value, "aiayn's patches and images are square")
        value = value[0]
    return ckpt.need(field, value)


def import_checkpoint(ckpt: Checkpoint) -> Imported:
    c = ckpt.field
    architecture = ckpt.check_architecture(ARCHITECTURE, BODY)
    if architecture == BODY and ckpt.has("vit.pooler.dense.weight"):
        log.warning("%s: ViTModel's pooler is dropped: ViTForImageClassification reads the [CLS] state, and so does "
                    "a classifier trained on this body", ckpt.directory)
    if not c("qkv_bias", True):
        raise ckpt.refuse("qkv_bias", False, "aiayn's attention projections have biases")
    image, patch, channels = _size(ckpt, "image_size"), _size(ckpt, "patch_size"), c("num_channels", 3)
    if image % patch:
        raise ckpt.refuse("patch_size", patch, f"it must divide image_size {image}")
    if channels != 1:
        log.warning("%s: %d channels; the image-classify door reads one-channel images", ckpt.directory, channels)
    labels = ckpt.labels() if architecture == ARCHITECTURE else []
    config = EncoderOnlyConfig(
        vocab_size=1, d_model=ckpt.need("hidden_size"), n_heads=ckpt.need("num_attention_heads"),
        n_layers=ckpt.need("num_hidden_layers"), d_ff=ckpt.need("intermediate_size"), dropout=c("hidden_dropout_prob", 0.0),
        attention_dropout=c("attention_probs_dropout_prob", 0.0), norm_first=True, positional="learned",
        max_positions=(image // patch) ** 2 + 1, n_classes=len(labels), input="patches",
        patch_dim=channels * patch * patch, layer_norm_eps=c("layer_norm_eps", 1e-12),
        activation=activation_in(ckpt, "hidden_act", "gelu"))
    info = {"task": ImageClassifyTask.name, "labels": labels, "patch_size": patch,
            "imported_from": {"format": "hf", "architecture": architecture}}
    ignored = ("pooler.*", "vit.pooler.*") if architecture == BODY else ()  # the pooler said above
    return Imported(EncoderOnly.model_type, config, params(config, channels, patch), None, info, ignored)


def exports(model) -> bool:
    """Whether `export_model` maps `model`: an encoder over image patches."""
    return model.model_type == EncoderOnly.model_type and model.config.input == "patches"


def export_model(model, tokenizers, info: dict, where: str) -> Exported:
    cfg: EncoderOnlyConfig = model.config
    refuse_options(where, "ViT", {
        "norm_first": (cfg.norm_first, True), "positional": (cfg.positional, "learned"),
        "pooling": (cfg.pooling, "cls"), "pooler": (cfg.pooler, False), "embedding_norm": (cfg.embedding_norm, False),
        "attention_score": (cfg.attention_score, "scaled_dot"), "n_classes > 0": (cfg.n_classes > 0, True)})
    patch = int(info.get("patch_size", 0))
    grid = math.isqrt(cfg.max_positions - 1)
    if patch < 1 or cfg.patch_dim % (patch * patch) or grid * grid != cfg.max_positions - 1:
        raise Unsupported(f"{where}: patch_size {patch}, patch_dim {cfg.patch_dim} and max_positions "
                          f"{cfg.max_positions} are not a square image of square patches plus [CLS]")
    channels = cfg.patch_dim // (patch * patch)
    labels = info.get("labels") or [str(i) for i in range(cfg.n_classes)]
    config = {"model_type": "vit", "architectures": [ARCHITECTURE], "hidden_size": cfg.d_model,
              "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.d_ff,
              "hidden_act": ACTIVATIONS_OUT[cfg.activation], "layer_norm_eps": cfg.layer_norm_eps,
              "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
              "image_size": grid * patch, "patch_size": patch, "num_channels": channels, "qkv_bias": True,
              "id2label": {str(i): x for i, x in enumerate(labels)}, "label2id": {x: i for i, x in enumerate(labels)}}
    files = {"preprocessor_config.json": json_file({
        "image_processor_type": "ViTImageProcessor", "do_resize": False, "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": False,  # 8-bit pixels to the door's [0, 1], nothing more
        "size": {"height": grid * patch, "width": grid * patch}})}
    return Exported(config, dump_params(model.state_dict(), params(cfg, channels, patch)), files)

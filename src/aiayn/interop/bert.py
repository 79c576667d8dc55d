"""BERT (`BertForSequenceClassification`, `BertForMaskedLM`, the bare `BertModel`) <-> aiayn's
encoder-only model with token inputs: a classifier (task classify), a masked language model (task
mlm), or a body without a head (task embed: feature extraction, and the start of a fine-tuning,
`train.init_from`). `BertForPreTraining` imports as a body: its two pre-training heads are dropped,
with a warning naming them.

BERT is the paper's encoder, post-norm, with four options of its own: a LayerNorm over the summed
embeddings (`embedding_norm`), token-type embeddings (`type_vocab_size`; every token is of type 0
here), the pooler a classifier reads (`pooler`), and unscaled embeddings (`scale_embeddings =
False`); the FFN and the MLM head use `hidden_act` (`activation = "gelu"`, exact), and the MLM
logits have a bias (`logits_bias`). Ids (`interop.vocab`) are a permutation: [PAD] -> PAD,
[CLS] -> BOS (the model puts BOS first as [CLS]), [SEP] -> EOS, [UNK] -> UNK. The tokenizer is
BERT's WordPiece (tokenizer.json); a text encodes as Hugging Face encodes it, [SEP] last, less the
[CLS] the model adds.
"""

from __future__ import annotations

import logging

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.tokenizer import TokenizerPair
from aiayn.interop.checkpoint import (ACTIVATIONS_OUT, Checkpoint, Exported, Imported, Param, Unsupported,
                                      activation_in, attention, dump_params, json_file, linear, refuse_options,
                                      same)
from aiayn.interop.tokenizers import HFTokenizer, backend_of
from aiayn.interop.vocab import IdMap
from aiayn.io import read_json_object
from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig
from aiayn.tasks.classify import ClassifyTask
from aiayn.tasks.embed import EmbedTask, pooling_of
from aiayn.tasks.mlm import MLMTask

log = logging.getLogger(__name__)

CLASSIFIER, MLM, BODY, PRETRAINING = "BertForSequenceClassification", "BertForMaskedLM", "BertModel", "BertForPreTraining"
HEADS_DROPPED = ("cls.predictions", "cls.seq_relationship")  # BertForPreTraining's MLM and next-sentence heads
SPECIALS = {"pad_token": ("[PAD]", PAD_ID), "cls_token": ("[CLS]", BOS_ID), "sep_token": ("[SEP]", EOS_ID),
            "unk_token": ("[UNK]", UNK_ID)}  # tokenizer_config.json's name: (BERT's default, aiayn's id)


def params(cfg: EncoderOnlyConfig, ids: IdMap) -> list[Param]:
    e = "bert.embeddings"
    table = [Param("embed.weight", (f"{e}.word_embeddings.weight",), lambda ts: ids.rows_in(ts[0]),
                   lambda t: [ids.rows_out(t)]),
             same("positions.weight", f"{e}.position_embeddings.weight"),
             same("token_types", f"{e}.token_type_embeddings.weight"), *linear("embed_norm", f"{e}.LayerNorm")]
    for i in range(cfg.n_layers):
        a, h = f"layers.{i}", f"bert.encoder.layer.{i}"
        s = f"{h}.attention.self"
        table += attention(f"{a}.self_attn", f"{s}.query", f"{s}.key", f"{s}.value", f"{h}.attention.output.dense")
        table += linear(f"{a}.sa_conn.norm", f"{h}.attention.output.LayerNorm")
        table += linear(f"{a}.ff.linear1", f"{h}.intermediate.dense") + linear(f"{a}.ff.linear2", f"{h}.output.dense")
        table += linear(f"{a}.ff_conn.norm", f"{h}.output.LayerNorm")
    head = "cls.predictions"
    mlm = linear("mlm_dense", f"{head}.transform.dense") + linear("mlm_norm", f"{head}.transform.LayerNorm")
    if cfg.pooler:
        table += linear("pool", "bert.pooler.dense")
    if cfg.n_classes:
        table += linear("classifier", "classifier")
    if not cfg.logits_bias:  # a classifier or a body: its MLM head (unused) keeps its initial weights, not exported
        return table + [Param(p.aiayn, p.hf, p.into, lambda t: [], optional=True) for p in mlm]
    return table + mlm + [Param("logits_bias", (f"{head}.bias",), lambda ts: ids.bias_in(ts[0], ts[0]),
                                lambda t: [ids.rows_out(t)])]


def read_tokenizer_json(ckpt: Checkpoint) -> str:
    """The checkpoint's tokenizer.json (the `tokenizers` library's), as text."""
    path = ckpt.directory / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (aiayn reads a Hugging Face tokenizer from its tokenizer.json)")
    return path.read_text(encoding="utf-8")


def import_checkpoint(ckpt: Checkpoint) -> Imported:
    c = ckpt.field
    architecture = (c("architectures") or ["?"])[0]
    if architecture not in (CLASSIFIER, MLM, BODY, PRETRAINING):
        raise ckpt.refuse("architectures", c("architectures"),
                          f"aiayn imports {CLASSIFIER}, {MLM}, {BODY} and {PRETRAINING}")
    body = architecture in (BODY, PRETRAINING)
    dropped = [name for name in HEADS_DROPPED if any(n.startswith(name + ".") for n in ckpt.names)]
    if body and dropped:
        log.warning("%s: %s's heads %s are dropped: aiayn imports its body, on which a new head is trained "
                    "(train.init_from)", ckpt.directory, architecture, ", ".join(dropped))
    for field, value, want in (("position_embedding_type", c("position_embedding_type", "absolute"), "absolute"),
                               ("is_decoder", c("is_decoder", False), False),
                               ("tie_word_embeddings", c("tie_word_embeddings", True), True)):
        if value != want:
            raise ckpt.refuse(field, value, f"aiayn's encoder-only model has {want!r}")
    activation = activation_in(ckpt, "hidden_act", "gelu")
    if activation == "relu" and architecture == MLM:
        raise ckpt.refuse("hidden_act", "relu", "aiayn's MLM head uses GELU with a ReLU FFN")
    problem = c("problem_type")
    if architecture == CLASSIFIER and problem not in (None, "single_label_classification"):
        raise ckpt.refuse("problem_type", problem, "aiayn's classifier picks one label by a softmax")
    tokenizer = _import_tokenizer(ckpt)
    labels = ckpt.labels() if architecture == CLASSIFIER else []
    if architecture == CLASSIFIER and len(labels) < 2:
        raise ckpt.refuse("num_labels", len(labels), "a softmax over one label is a regression head, not a classifier")
    config = EncoderOnlyConfig(
        vocab_size=tokenizer.ids.size, d_model=ckpt.need("hidden_size"), n_heads=ckpt.need("num_attention_heads"),
        n_layers=ckpt.need("num_hidden_layers"), d_ff=ckpt.need("intermediate_size"), dropout=c("hidden_dropout_prob", 0.1),
        attention_dropout=c("attention_probs_dropout_prob", 0.1), norm_first=False, positional="learned",
        max_positions=c("max_position_embeddings", 512), n_classes=len(labels),
        layer_norm_eps=c("layer_norm_eps", 1e-12),
        activation=activation, logits_bias=architecture == MLM, scale_embeddings=False, embedding_norm=True,
        type_vocab_size=c("type_vocab_size", 2),
        pooler=architecture == CLASSIFIER or (body and ckpt.has("bert.pooler.dense.weight")))
    task = EmbedTask.name if body else ClassifyTask.name if labels else MLMTask.name
    info = {"task": task, "labels": labels, "max_input_tokens": config.max_positions - 1,
            "imported_from": {"format": "hf", "architecture": architecture}}
    if body:
        info.update(pooling_of(ckpt.directory))  # sentence-transformers' pooling, where its files say it
    ignored = ("*position_ids", *(f"{head}.*" for head in dropped if body))  # a buffer; the heads said above
    return Imported(EncoderOnly.model_type, config, params(config, tokenizer.ids), TokenizerPair.shared(tokenizer), info,
                    ignored)


def _import_tokenizer(ckpt: Checkpoint) -> HFTokenizer:
    text = read_tokenizer_json(ckpt)
    backend = backend_of(text, str(ckpt.directory / "tokenizer.json"))
    path = ckpt.directory / "tokenizer_config.json"
    settings = read_json_object(path, missing_ok=True)
    specials = {}
    for key, (default, aiayn_id) in SPECIALS.items():
        token = settings.get(key) or default
        token = token.get("content", default) if isinstance(token, dict) else token
        hf_id = backend.token_to_id(token)
        if hf_id is None:
            raise Unsupported(f"{ckpt.directory / 'tokenizer.json'}: no {key} {token!r}")
        specials[hf_id] = aiayn_id
    return HFTokenizer(text, IdMap.build(ckpt.need("vocab_size"), specials), str(ckpt.directory / "tokenizer.json"))


def exports(model) -> bool:
    """Whether `export_model` maps `model`: an encoder over token ids."""
    return model.model_type == EncoderOnly.model_type and model.config.input == "tokens"


def architecture_of(cfg: EncoderOnlyConfig) -> str:
    """The Hugging Face class of an encoder-only model: a classifier, an MLM model, or a bare body."""
    return CLASSIFIER if cfg.n_classes else MLM if cfg.logits_bias else BODY


def export_model(model, tokenizers, info: dict, where: str) -> Exported:
    cfg: EncoderOnlyConfig = model.config
    classify = cfg.n_classes > 0
    architecture = architecture_of(cfg)
    refuse_options(where, "BERT", {
        "norm_first": (cfg.norm_first, False), "positional": (cfg.positional, "learned"),
        "scale_embeddings": (cfg.scale_embeddings, False), "embedding_norm": (cfg.embedding_norm, True),
        "attention_score": (cfg.attention_score, "scaled_dot"), "pooling": (cfg.pooling, "cls"),
        "pooler": (cfg.pooler, {CLASSIFIER: True, MLM: False, BODY: cfg.pooler}[architecture]),  # a body: either
        "logits_bias and n_classes": (cfg.logits_bias and classify, False),
        "type_vocab_size > 0": (cfg.type_vocab_size > 0, True)})
    if cfg.activation == "relu" and architecture == MLM:  # as import refuses it
        raise Unsupported(f"{where}: activation = 'relu' has no BERT counterpart in an MLM model: BERT's one "
                          "hidden_act acts in the MLM head too, where aiayn's model uses GELU beside a ReLU FFN")
    tokenizer = HFTokenizer.of(tokenizers, where, "BERT")
    ids = tokenizer.ids
    labels = info.get("labels") or []
    config = {"model_type": "bert", "architectures": [architecture], "vocab_size": ids.hf_size,
              "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
              "intermediate_size": cfg.d_ff, "hidden_act": ACTIVATIONS_OUT[cfg.activation],
              "max_position_embeddings": cfg.max_positions, "type_vocab_size": cfg.type_vocab_size,
              "layer_norm_eps": cfg.layer_norm_eps, "hidden_dropout_prob": cfg.dropout,
              "attention_probs_dropout_prob": cfg.attention_dropout, "pad_token_id": ids.inverse[PAD_ID],
              "tie_word_embeddings": True}
    if classify:
        config.update(id2label={str(i): x for i, x in enumerate(labels)}, label2id={x: i for i, x in enumerate(labels)})
    files = {"tokenizer.json": tokenizer.json.encode("utf-8"),
             "tokenizer_config.json": json_file({"tokenizer_class": "BertTokenizer",
                                                 "model_max_length": cfg.max_positions,
                                                 **{k: tokenizer.backend.id_to_token(ids.inverse[a])
                                                    for k, (_, a) in SPECIALS.items()}})}
    tensors = dump_params(model.state_dict(), params(cfg, ids))
    if architecture == BODY:  # BertModel saves its tensors without the "bert." of the models that hold one
        tensors = {name.removeprefix("bert."): t for name, t in tensors.items()}
    return Exported(config, tensors, files)

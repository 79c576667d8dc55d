"""Smoke tests of the benchmark scripts: they run on a tiny config and their --json line parses.

No timing assertions: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import math
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from aiayn.runtime import native_bf16
from shared_data import SHARED_DATA

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _last_json_line(script: str, *args: str) -> dict:
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), *args],
                            capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_train_throughput_json_keys():
    out = _last_json_line("train_throughput.py", "--configs", "tiny", "--precisions", "fp32,bf16",
                          "--steps", "2", "--warmup-steps", "1", "--max-tokens", "300",
                          "--peak-size", "256", "--threads", "1", "--json")
    assert out["peak_gflops"] > 0
    assert [(r["config"], r["precision"]) for r in out["rows"]] == [("tiny", "fp32"), ("tiny", "bf16")]
    for row in out["rows"]:
        assert {"config", "precision", "ours_tok_s", "torch_tok_s", "ratio", "mfu"} <= row.keys()
        assert all(math.isfinite(row[k]) and row[k] > 0 for k in ("ours_tok_s", "torch_tok_s", "ratio", "mfu"))
        assert math.isclose(row["ratio"], row["ours_tok_s"] / row["torch_tok_s"])


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_torch_reference_has_ours_dropouts_and_final_norms(norm_first):
    """nn.Transformer's one dropout fell on attention weights and inside the FFN too (work ours does not do
    by default, and it kept torch's attention off its fused kernels), and its final norms stood in post-norm."""
    sys.path.insert(0, str(BENCHMARKS))
    from torch import nn

    from aiayn.config import TransformerConfig
    from train_throughput import TorchReference

    ref = TorchReference(TransformerConfig.preset("tiny", src_vocab_size=50, norm_first=norm_first)).transformer
    layers = [*ref.encoder.layers, *ref.decoder.layers]
    assert all(layer.self_attn.dropout == 0.0 and isinstance(layer.dropout, nn.Identity) for layer in layers)
    assert all(layer.multihead_attn.dropout == 0.0 for layer in ref.decoder.layers)
    assert all(layer.dropout1.p == 0.1 for layer in layers)  # the residual dropout, as ours (§5.4)
    assert isinstance(ref.encoder.norm, nn.LayerNorm) == isinstance(ref.decoder.norm, nn.LayerNorm) == norm_first


def test_train_flops_counts_one_linear_by_hand():
    """One encoder and one decoder layer, D=2, F=4, V=8, B=1, S=T=1, counted by hand."""
    sys.path.insert(0, str(BENCHMARKS))
    from train_throughput import train_flops

    from aiayn.config import TransformerConfig

    cfg = TransformerConfig(src_vocab_size=8, d_model=2, n_heads=1, d_ff=4, n_encoder_layers=1, n_decoder_layers=1)
    enc = 2 * (4 * 4 + 2 * 8) + 4 * 2  # QKVO + FFN, then QKᵀ and AV
    dec = 2 * (6 * 4 + 2 * 8) + 2 * 2 * 4 + 4 * 2 + 4 * 2  # + memory K/V, self and cross QKᵀ/AV
    out = 2 * 2 * 8
    assert train_flops(cfg, 1, 1, 1) == 3 * (enc + dec + out)


def test_cpu_training_ops_json_keys():
    out = _last_json_line("cpu_training_ops.py", "--batch", "4", "--source", "6", "--target", "3", "--d-model", "16",
                          "--vocab", "40", "--repeats", "1", "--threads", "1", "--keep-freed-memory", "--json")
    assert out["keep_freed_memory"] in (True, False) and out["allocator"]
    for op in ("dropout", "attention_bf16", "copy_mixture_and_loss", "copy_decode_step_S512"):
        assert all(math.isfinite(out[f"{op}_{k}"]) and out[f"{op}_{k}"] > 0 for k in ("ours", "torch", "speedup"))


def test_loss_json_keys():
    out = _last_json_line("loss.py", "--rows", "64", "--vocab", "50", "--repeats", "1", "--threads", "1", "--json")
    assert (out["rows_n"], out["vocab"]) == (64, 50)
    assert all(math.isfinite(out[f"{p}_ms"]) and out[f"{p}_ms"] > 0 for p in ("ours", "autograd", "torch"))


def test_layer_complexity_json_and_table_1_columns():
    out = _last_json_line("layer_complexity.py", "--d", "16", "--n", "8", "32", "--runs", "1", "--batch", "1",
                          "--threads", "1", "--json")
    rows = {(r["layer"], r["n"]): r for r in out["rows"]}
    assert rows[("recurrent (GRU)", 32)]["sequential"] == 32 and rows[("self-attention", 32)]["path"] == 1
    assert rows[("self-attention", 32)]["gflop"] > 4 * rows[("self-attention", 8)]["gflop"] * 0.99  # grows with n
    assert all(r["ms"] > 0 for r in out["rows"])


def test_serve_load_reads_batching_from_metrics_and_percentiles_from_latencies():
    import collections

    sys.path.insert(0, str(BENCHMARKS))
    from serve_load import mean_batch, summarize

    before = {"texts": 10, "batches": 5, "continuous_steps": 0, "continuous_texts_in_flight": 0}
    assert mean_batch(before, {**before, "texts": 40, "batches": 8}) == 10.0  # whole calls: 30 texts in 3
    assert mean_batch(before, {**before, "continuous_steps": 4, "continuous_texts_in_flight": 90}) == 22.5
    row = summarize([i / 1000 for i in range(1, 101)], collections.Counter({200: 100, 503: 2}), 2.0, 8)
    assert (row["ok"], row["errors"], row["sent_per_s"]) == (100, 2, 50.0)
    assert round(row["p50_ms"], 1) == 50.5 and round(row["p99_ms"], 2) == 99.01


def test_serve_load_overflow_runs_sum_the_answers_and_count_the_runs_with_other_errors(monkeypatch, tmp_path):
    import contextlib

    sys.path.insert(0, str(BENCHMARKS))
    import serve_load

    outcomes = iter([{"ok": 140, "error_kinds": {"503": 116}, "failures": []},
                     {"ok": 139, "error_kinds": {"503": 116, "ReadError": 1}, "failures": [("ReadError", 0.2, 5.1)]},
                     {"ok": 141, "error_kinds": {"503": 115}, "failures": []}])
    servers = []

    @contextlib.contextmanager
    def fake_server(model, *options, log):
        servers.append(options)  # a fresh server for each run, with the queue of 8
        yield "http://stub", 0

    monkeypatch.setattr(serve_load, "server", fake_server)
    monkeypatch.setattr(serve_load, "load", lambda url, sentences, clients: next(outcomes))
    total = serve_load.overflow_checks(Path("model"), ("--keep-alive", "5"), ["s"], 3, tmp_path)
    assert total == {"runs": 3, "ok": 420, "error_kinds": {"503": 347, "ReadError": 1}, "runs_with_other_errors": 1,
                     "failures": [("ReadError", 0.2, 5.1)]}
    assert servers == [("--keep-alive", "5", "--max-queue", "8")] * 3


def test_serve_load_wrk_client_sends_every_sentence_and_counts_errors():
    """wrk (Debian's package) with our Lua script against a stub server that answers 200, or 503
    for one sentence: every sentence is sent as a /v1/translate JSON body, and the summary line is read."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (setup.sh installs it as root: apt-get install wrk)")
    sys.path.insert(0, str(BENCHMARKS))
    from serve_load import load_wrk

    seen: list = []

    class Stub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802  (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body["text"][0]))
            status = 503 if body["text"][0] == "busy" else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        row = load_wrk(f"http://127.0.0.1:{server.server_address[1]}", ["ein Hund", "zwei Katzen", "busy"], 2, 1)
    finally:
        server.shutdown()
        server.server_close()
    assert {path for path, _ in seen} == {"/v1/translate"} and {t for _, t in seen} == {"ein Hund", "zwei Katzen", "busy"}
    busy = sum(t == "busy" for _, t in seen)  # wrk leaves out the answers in flight at its end: up to 2
    assert busy - 2 <= row["error_kinds"]["non-2xx"] <= busy and row["error_kinds"]["non-2xx"] > 0
    assert len(seen) - 2 <= row["ok"] + row["errors"] <= len(seen) and row["error_kinds"]["socket"] == 0
    assert row["sent_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]


def _tiny_translation_run(tmp_path: Path, train: str = "max_updates = 2\n", max_len_b: int | None = 4) -> Path:
    """A finished `aiayn train` run of the tiny preset on 60 symbol pairs, with a test split; `train`
    is its [train] section (progress and BLEU validation off). Outputs are cut at the source's length +
    `max_len_b` (None: the defaults'): an untrained model runs to its limit."""
    from aiayn.cli import main

    data = tmp_path / "data"
    data.mkdir()
    lines = [" ".join("abcdef"[(i * 7 + j) % 6] for j in range(1 + i % 5)) for i in range(60)]
    for split in ("train", "val", "test"):
        for lang in ("x", "y"):
            (data / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines))
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(f'[model]\npreset = "tiny"\n[data]\ncorpus = "{data}"\nsrc_lang = "x"\ntgt_lang = "y"\n'
                      'vocab_type = "symbols"\nmax_tokens = 200\ntest_split = "test"\n'
                      f"[train]\n{train}bleu = false\nprogress = false\n"
                      + ("" if max_len_b is None else f"[decode]\nmax_len_a = 1.0\nmax_len_b = {max_len_b}\n"))
    run_dir = tmp_path / "run"
    assert main(["train", str(recipe), "--run-dir", str(run_dir)]) == 0
    return run_dir


def test_decode_settings_reruns_the_runs_own_report_without_writing_to_it(tmp_path):
    """Its first row is the run's test_scores.json figure for figure; another setting decodes
    differently; the run directory is left as it was."""
    run_dir = _tiny_translation_run(tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out = _last_json_line("decode_settings.py", str(run_dir), "--try", "decode.max_len_a=0 decode.max_len_b=1",
                          "--threads", "1", "--json")
    own, short = out["rows"]
    report = json.loads((run_dir / "test_scores.json").read_text())
    assert own["bleu"] == report["bleu"] and own["n"] == report["n_sentences"] == 60
    assert short["words"] <= 1 < own["words"]  # one token at most: the setting reached the search
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_decode_settings_average_last_rows_score_as_aiayn_average_then_aiayn_evaluate(tmp_path):
    """A row with another train.average_last decodes the mean of the run's last N checkpoints: its
    figures are those of `aiayn average --last N` scored by `aiayn evaluate`; asking for more
    checkpoints than the run kept is an error naming the directory."""
    from aiayn.cli import main

    run_dir = _tiny_translation_run(tmp_path, "max_updates = 40\nsave_every_updates = 10\nkeep_last = 4\n"
                                              "average_last = 2\n", max_len_b=None)  # its two models' outputs end apart
    data = tmp_path / "data"
    out = _last_json_line("decode_settings.py", str(run_dir), "--try", "train.average_last=1",
                          "--try", "train.average_last=4", "--threads", "1", "--json")
    rows = {row["setting"]: row for row in out["rows"]}
    for n in (1, 4):
        avg = tmp_path / f"avg{n}"
        assert main(["average", str(run_dir / "checkpoints"), "--last", str(n), "-o", str(avg)]) == 0
        hyp = tmp_path / f"avg{n}.hyp"
        ref = json.loads(subprocess.run(
            [sys.executable, "-m", "aiayn", "evaluate", "--model", str(avg), "--src", str(data / "test.x"),
             "--ref", str(data / "test.y"), "--save-hyp", str(hyp), "--json"],
            capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        words = [len(h.split()) for h in hyp.read_text().splitlines()]
        row = rows[f"train.average_last={n}"]
        assert row["bleu"] == pytest.approx(ref["bleu"], abs=0.005) and row["words"] == sum(words) / len(words)
    assert rows["train.average_last=1"]["words"] != rows["train.average_last=4"]["words"]  # different models
    result = subprocess.run([sys.executable, str(BENCHMARKS / "decode_settings.py"), str(run_dir), "--try",
                             "train.average_last=5 train.keep_last=5", "--threads", "1"], capture_output=True, text=True)
    assert result.returncode != 0 and "checkpoints: 4 checkpoints kept" in result.stderr


def _labelled_corpus(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    """A 40-text SST-like corpus of tiny_models' words: dev.tsv, and train_full.tsv of the same texts."""
    from tiny_models import WORDS

    texts = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(1 + i % 4)) for i in range(40)]
    gold = ["pos" if i % 3 else "neg" for i in range(40)]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(texts, gold)))
    (corpus / "train_full.tsv").write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, gold)))
    return corpus, texts, gold


def test_classifier_averaging_rows_agree_with_the_classify_door_and_aiayn_average(tmp_path):
    """Each model's row is the accuracy of its `load_pipeline` labels, the ensemble's that of the mean of
    the pipelines' label probabilities, the weight average's that of `aiayn average`'s model; `tune` reads
    the carved sentences of the training file (none of the phrases)."""
    from safetensors.torch import load_file, save_file
    from tiny_models import tiny_model

    from aiayn.cli import main
    from aiayn.tasks import load_pipeline
    from aiayn.tasks.classify import carve

    models = [tiny_model(tmp_path / name, "classify") for name in ("a", "b", "c")]
    generator = torch.Generator().manual_seed(1)
    for model in models[1:]:  # three different models of one config
        weights = load_file(model / "model.safetensors")
        save_file({k: v + 0.5 * torch.randn(v.shape, generator=generator) for k, v in weights.items()},
                  model / "model.safetensors")
    corpus, texts, gold = _labelled_corpus(tmp_path)
    out = _last_json_line("classifier_averaging.py", *map(str, models), "--corpus", str(corpus), "--split", "dev",
                          "--split", "tune", "--carve", "0.5", "--threads", "1", "--json")
    rows = {row["model"]: row for row in out["rows"]}

    def score(labels, split_gold):
        return pytest.approx(100.0 * sum(y == g for y, g in zip(labels, split_gold)) / len(split_gold))

    held = carve(texts, 0.5)[1]
    splits = {"dev": (texts, gold), "tune": ([texts[i] for i in held], [gold[i] for i in held])}
    assert 0 < len(held) < len(texts)
    for split, (xs, ys) in splits.items():
        answers = [load_pipeline(m)(xs) for m in models]
        for model, labels in zip(models, answers):
            assert rows[str(model)][split] == score([y for y, _ in labels], ys)
        positive = [sum(p if y == "pos" else 1 - p for y, p in each) / 3 for each in zip(*answers)]
        assert rows["ensemble (mean probability)"][split] == score(["pos" if p > 0.5 else "neg" for p in positive], ys)
    assert main(["average", *map(str, models), "-o", str(tmp_path / "soup")]) == 0
    for split, (xs, ys) in splits.items():
        assert rows["weight average"][split] == score([y for y, _ in load_pipeline(tmp_path / "soup")(xs)], ys)
    assert len({row["dev"] for row in out["rows"]}) > 1  # the models differ: the rows are not one figure


@pytest.mark.slow  # among the slowest smoke tests (pytest --durations): kept out of the default suite's 10 minutes
def test_compare_revisions_of_one_checkout_against_itself():
    """Both sides run the same tree: every row of decode_speed comes back, with both medians and a ratio."""
    root = BENCHMARKS.parent
    out = _last_json_line("compare_revisions.py", "--other", str(root), "--rounds", "1", "--json", "--",
                          "benchmarks/decode_speed.py", "--skip", "textbook", "hf", "ct2_fp32", "ct2_int8", "ours_bf16",
                          "ours_int8",
                          "--runs", "1", "--preset", "tiny", "--batch", "2")
    rows = {(r["strategy"], r["batch"], r["value"]): r for r in out["rows"]}
    assert set(rows) == {("greedy", 2, "ours"), ("beam4", 2, "ours")}
    for r in rows.values():
        assert r["this"] > 0 and r["other"] > 0 and math.isclose(r["ratio"], r["this"] / r["other"])


def test_beam_profile_kinds_add_up_to_the_step():
    out = _last_json_line("beam_profile.py", "--preset", "tiny", "--batch", "2", "--runs", "1", "--threads", "1",
                          "--json")
    step = out["ms_per_step"]["2"]
    assert set(step) == {"matmul", "softmax", "topk", "cache", "other", "python"}
    assert all(v >= 0 for v in step.values()) and step["matmul"] > 0 and step["topk"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_beam_profile_on_cuda_counts_the_kernel_launches():
    result = subprocess.run([sys.executable, str(BENCHMARKS / "beam_profile.py"), "--preset", "tiny", "--batch", "2",
                             "--runs", "1", "--device", "cuda", "--top", "40", "--json"],
                            capture_output=True, text=True, timeout=300, check=True)
    step = json.loads(result.stdout.strip().splitlines()[-1])["ms_per_step"]["2"]
    assert step["matmul"] > 0 and "cudaLaunchKernel" in result.stdout


def test_beam_profile_sorts_op_names_into_kinds():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from beam_profile import kind_of
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert [kind_of(n) for n in ("aten::addmm", "aten::_log_softmax", "aten::topk", "aten::index_select",
                                 "aten::add_", "aten::_scaled_dot_product_flash_attention_for_cpu")] == \
        ["matmul", "softmax", "topk", "cache", "other", "matmul"]


def test_int8_matmul_times_every_candidate_and_ratio():
    out = _last_json_line("int8_matmul.py", "--runs", "1", "--calls", "1", "--rows", "2", "--threads", "1", "--json")
    assert {r["layer"] for r in out["rows"]} == {"qkv", "ff1", "ff2", "output"}
    for r in out["rows"]:
        assert all(r[k] > 0 for k in ("fp32", "bf16", "fbgemm", "int8_rows", "w8_only"))
        assert math.isclose(r["fp32/int8_rows"], r["fp32"] / r["int8_rows"], rel_tol=1e-2)


@pytest.mark.slow  # among the slowest smoke tests (pytest --durations): kept out of the default suite's 10 minutes
def test_decode_speed_gives_every_peer_a_speed_a_ratio_and_whether_it_wrote_our_tokens():
    out = _last_json_line("decode_speed.py", "--skip", "textbook", "hf", "--runs", "1", "--preset", "tiny",
                          "--batch", "2", "--json")
    has_ct2 = importlib.util.find_spec("ctranslate2") is not None  # setup.sh installs it; a lent GPU machine lacks it
    for row in out["rows"]:
        assert row["ours"] > 0 and row["ours_int8"] > 0
        bf16 = ("ours_bf16",) if native_bf16("cpu") else ()  # timed only where the CPU multiplies bf16 natively
        assert set(row["same_as_ours"]) == {"ours_int8", *bf16, *(("ct2_fp32", "ct2_int8") if has_ct2 else ())}
        assert row["same_as_ours"].get("ct2_fp32", True)  # the same fp32 weights and search: the same tokens
        for peer in ("ct2_fp32", "ct2_int8"):
            assert row[peer] > 0 if has_ct2 else row[peer] is None
        if has_ct2:  # the JSON rounds to 3 decimals: a ratio far below 1 (a loaded machine) may differ by that much
            assert math.isclose(row["ours_int8/ct2_int8"], row["ours_int8"] / row["ct2_int8"], rel_tol=1e-2,
                                abs_tol=5e-4)


def test_train_throughput_configs_take_overrides_of_a_preset():
    sys.path.insert(0, str(BENCHMARKS))
    from train_throughput import model_config

    from aiayn.config import TransformerConfig

    cfg = model_config("small+d_model=128+n_encoder_layers=4+dropout=0.2")
    small = TransformerConfig.preset("small", src_vocab_size=cfg.src_vocab_size)
    assert (cfg.d_model, cfg.n_encoder_layers, cfg.dropout) == (128, 4, 0.2)
    assert (cfg.d_ff, cfg.n_heads, cfg.n_decoder_layers) == (small.d_ff, small.n_heads, small.n_decoder_layers)
    assert model_config("small") == small
    for bad in ("small+d_model=x", "small+nonsense=3", "small+d_model", "nope"):
        with pytest.raises(SystemExit, match="--configs"):
            model_config(bad)


def _benchmark(name: str):
    """The benchmark script `name` imported as a module (its own imports, e.g. `_common`, resolved)."""
    import importlib

    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_cnn_rand_matches_kims_model_written_window_by_window():
    """Scores equal max-over-time of ReLU(w · window + b) over every window of the padded text, computed
    in loops; a text scores the same alone and beside a longer one; the constraint caps row norms at 3."""
    cnn = _benchmark("sst2_cnn_rand")
    torch.manual_seed(0)
    model = cnn.CnnRand(n_words=6, n_classes=2, dim=4, maps=3).eval()
    vocab = {"a": 2, "b": 3, "c": 4, "d": 5}
    ids = cnn.batch_ids(["a b c"], vocab)[0]
    with torch.no_grad():
        x = model.embed(ids)  # (T, dim)
        pooled = []
        for conv in model.convs:
            width = conv.kernel_size[0]
            windows = [x[t:t + width].T for t in range(len(ids) - width + 1)]  # each (dim, width)
            pooled += [max(float(torch.relu((conv.weight[m] * w).sum() + conv.bias[m])) for w in windows)
                       for m in range(conv.out_channels)]
        expected = model.out(torch.tensor(pooled)).softmax(-1)
        alone = cnn.probabilities(model, ["a b c"], vocab)[0]
        beside = cnn.probabilities(model, ["a b c", "d a b c d a b c d e"], vocab)[0]
    assert torch.allclose(alone, expected, atol=1e-6) and torch.allclose(beside, alone, atol=1e-6)
    with torch.no_grad():
        model.out.weight.mul_(100.0)
    model.constrain()
    assert torch.allclose(model.out.weight.norm(dim=1), torch.full((2,), 3.0))


def test_sst2_cnn_rand_trains_on_the_recipes_split_and_scores_ours_as_the_door_does(tmp_path):
    from tiny_models import tiny_model

    from aiayn.tasks import load_pipeline

    corpus, texts, gold = _labelled_corpus(tmp_path)
    ours = tiny_model(tmp_path / "ours", "classify")
    out = _last_json_line("sst2_cnn_rand.py", "--corpus", str(corpus), "--carve", "0.5", "--epochs", "2",
                          "--seeds", "3", "--ours", str(ours), "--threads", "1", "--json")
    cnn_row, our_row = out["rows"]
    assert cnn_row["model"] == "CNN-rand, seed 3" and cnn_row["epoch"] in (1, 2)
    assert all(0 <= cnn_row[s] <= 100 for s in ("tune", "dev"))
    labels = [y for y, _ in load_pipeline(ours)(texts)]
    assert our_row["dev"] == pytest.approx(100.0 * sum(y == g for y, g in zip(labels, gold)) / len(gold))


class _LetterTokens:
    """A word is one token per letter (ids 1-26): words of several tokens, as subwords make."""

    def encode_batch(self, words):
        return [[ord(c) - ord("a") + 1 for c in word] for word in words]


def test_sst2_phrases_finds_each_whole_sentences_labelled_phrases_at_their_token_offsets():
    phrases = _benchmark("sst2_phrases")
    texts = ["a bb c", "a bb", "c", "a", "d a", "bb c d e"]
    labels = [1, 0, 1, 1, 0, 1]
    data, skipped = phrases.sentences(texts, labels, _LetterTokens(), limit=4)
    # wholes: "a bb c" (a | b b | c), "d a"; "bb c d e" (5 tokens) is over the limit
    assert skipped == 1 and [s.ids for s in data] == [[1, 2, 2, 3], [4, 1]]
    assert data[0].spans == [(0, 1, 1), (0, 3, 0), (0, 4, 1), (3, 4, 1)]  # a, a bb, a bb c, c
    assert data[1].spans == [(0, 2, 0), (1, 2, 1)]  # d a, a


def _tiny_encoder():
    from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig

    torch.manual_seed(0)
    return EncoderOnly(EncoderOnlyConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_classes=2,
                                         dropout=0.0)).eval()


def test_sst2_phrase_span_scores_are_the_classifier_on_each_spans_mean_state():
    """Against the mean of `encode`'s states taken span by span; a text scores the same beside a longer one."""
    phrases = _benchmark("sst2_phrases")
    model = _tiny_encoder()
    tokens = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]])  # (2, 5), the first padded
    spans = torch.tensor([[0, 0, 3], [0, 1, 2], [1, 2, 5], [1, 0, 1]])
    with torch.no_grad():
        h = model.encode(tokens)[0]  # (2, 6, D), [CLS] first
        expected = torch.stack([model.classifier(h[b, 1 + i:1 + j].mean(0)) for b, i, j in spans.tolist()])
        got = phrases.span_scores(model, tokens, spans)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    alone = phrases.probabilities(model, [[5, 6, 7]])
    beside = phrases.probabilities(model, [[5, 6, 7], [8, 9, 10, 11, 12]])
    torch.testing.assert_close(beside[:1], alone, rtol=0, atol=1e-6)


def test_sst2_phrase_loss_weighs_phrases_against_the_sentence():
    import torch.nn.functional as F

    phrases = _benchmark("sst2_phrases")
    model = _tiny_encoder()
    batch = [phrases.Sentence([5, 6, 7], [(0, 1, 1), (0, 3, 0), (1, 3, 1)]), phrases.Sentence([8, 9], [(0, 2, 1)])]
    with torch.no_grad():
        loss = phrases.batch_loss(model, batch, phrase_weight=0.25, label_smoothing=0.0)
        each = []
        for s in batch:
            h = model.encode(torch.tensor([s.ids]))[0][0, 1:]  # (T, D)
            each += [(F.cross_entropy(model.classifier(h[i:j].mean(0))[None], torch.tensor([y])),
                      1.0 if j - i == len(s.ids) else 0.25) for i, j, y in s.spans]
    expected = sum(w * x for x, w in each) / sum(w for _, w in each)  # two sentences at 1, two phrases at 0.25
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)


def test_sst2_phrases_oversample_repeats_the_whole_sentences_only(tmp_path):
    from aiayn.tasks.classify import read_labelled

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = [("a b c", "1"), ("a b", "0"), ("c", "1"), ("d e", "0"), ("e", "1")]
    (corpus / "train_full.tsv").write_text("sentence\tlabel\n" + "".join(f"{t} \t{y}\n" for t, y in rows))
    (corpus / "dev.tsv").write_text("sentence\tlabel\nx\t1\n")
    out = _last_json_line("sst2_phrases.py", "oversample", str(tmp_path / "os"), "--corpus", str(corpus),
                          "--times", "3", "--json")
    texts, labels, _ = read_labelled(tmp_path / "os" / "train_full.tsv.gz")
    assert sorted(zip(texts, labels)) == sorted(rows + [("a b c", "1"), ("d e", "0")] * 2)
    assert out["texts"] == 9 and out["whole"] == 2
    assert (tmp_path / "os" / "dev.tsv").read_text() == (corpus / "dev.tsv").read_text()
    refused = subprocess.run([sys.executable, str(BENCHMARKS / "sst2_phrases.py"), "oversample", str(corpus), "--corpus",
                              str(corpus)], capture_output=True, text=True)  # it wrote into its input before
    assert refused.returncode != 0 and "is, or holds, an input" in refused.stderr
    assert read_labelled(corpus / "train_full.tsv")[0] == [t for t, _ in rows]


def test_sst2_phrases_spans_fine_tunes_on_the_recipes_carve_and_scores_dev_once(tmp_path):
    from tiny_models import tiny_model

    corpus, texts, gold = _labelled_corpus(tmp_path)
    start = tiny_model(tmp_path / "mlm", "classify")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('task = "classify"\n[model]\ntype = "encoder-only"\n[optim]\nwarmup_steps = 5\n'
                      f'[data]\ncorpus = "{corpus}"\ntrain_split = "train_full"\nvalid_split = "tune"\n'
                      'carve_fraction = 0.5\ntest_split = "dev"\nmax_input_tokens = 8\n[train]\nmax_updates = 6\n')
    out = _last_json_line("sst2_phrases.py", "spans", str(start), "--recipe", str(recipe), "--seeds", "2",
                          "--updates", "6", "--batch", "4", "--validate-every", "3", "--threads", "1", "--json")
    (row,) = out["rows"]
    assert row["seed"] == 2 and row["update"] in (3, 6) and row["phrase_weight"] == 1.0
    assert all(0 <= row[s] <= 100 for s in ("tune", "dev"))


def test_seed_spread_rows_are_each_runs_report_and_evaluate_on_the_split(tmp_path):
    """Per run: test figures as test_scores.json, the split's as `aiayn evaluate` on its files, the update
    and epoch of the last checkpoint, the NLL metrics.jsonl logged; then mean and sd across the runs."""
    import statistics

    runs = []
    for seed in (1, 2):
        (tmp_path / str(seed)).mkdir()
        runs.append(_tiny_translation_run(tmp_path / str(seed), f"max_updates = 20\nvalidate_every = 10\nseed = {seed}\n"))
    out = _last_json_line("seed_spread.py", *map(str, runs), "--split", "val", "--nll-at", "10", "--threads", "1",
                          "--json")
    for run_dir, row in zip(runs, out["rows"]):
        report = json.loads((run_dir / "test_scores.json").read_text())
        data = run_dir.parent / "data"
        ref = json.loads(subprocess.run(
            [sys.executable, "-m", "aiayn", "evaluate", "--model", str(run_dir / "model"), "--src", str(data / "val.x"),
             "--ref", str(data / "val.y"), "--json"], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert row["test.bleu"] == report["bleu"] and row["val.bleu"] == pytest.approx(ref["bleu"], abs=0.005)
        assert row["updates"] == 20 and row["epochs"] >= 1
        assert row["nll@10"] == next(r["nll"] for r in logged if r.get("split") == "valid" and r["step"] == 10)
    mean, sd, _ = out["summary"]
    for column in ("test.bleu", "val.bleu", "nll@10"):
        values = [row[column] for row in out["rows"]]
        assert mean[column] == pytest.approx(statistics.mean(values)) and sd[column] == pytest.approx(statistics.stdev(values))
    assert out["rows"][0]["nll@10"] != out["rows"][1]["nll@10"]  # two seeds, two runs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="beam_syncs.py profiles decoding on a CUDA device")
def test_beam_syncs_profiles_each_decoder_per_step():
    out = _last_json_line("beam_syncs.py", "--batch", "1", "--runs", "1", "--json")
    rows = {r["decoder"]: r for r in out["rows"]}
    assert set(rows) == {"ours greedy", "ours beam4", "textbook beam4"}
    assert rows["ours beam4"]["waits_per_step"] == 1.0  # the step's one summary (decoding/beam.py)
    for r in rows.values():
        assert r["kernels_per_step"] > 0 and r["gpu_ms_per_step"] > 0 and r["ms_per_step"] > 0


def test_emit_json_writes_standard_json_with_null_for_nan(capsys):
    _benchmark("_common").emit_json({"rows": [{"sd": math.nan, "bleu": 41.5}], "summary": (math.inf, -math.inf, 1)})
    line = capsys.readouterr().out.strip()
    parsed = json.loads(line, parse_constant=lambda word: pytest.fail(f"non-standard JSON word {word}"))
    assert parsed == {"rows": [{"sd": None, "bleu": 41.5}], "summary": [None, None, 1]}


def test_seed_spread_refuses_runs_that_report_different_figures():
    spread = _benchmark("seed_spread")
    bleu = [{"run": "a", "test.bleu": 40.0}, {"run": "b", "test.bleu": 41.0}]
    assert spread.same_columns(bleu) == ["test.bleu"]
    with pytest.raises(SystemExit, match=r"^c: its figures are not those of a \(test.bleu, test.rouge2 differ\)"):
        spread.same_columns([*bleu, {"run": "c", "test.rouge2": 7.0}])


def test_a_peer_that_does_not_import_is_left_out_with_a_note(capsys, monkeypatch, tmp_path):
    """A missing package, or one that fails to import (a broken install), is a skipped row, not a crash."""
    common = _benchmark("_common")
    assert common.peer_installed("json", "json row")
    assert not common.peer_installed("no_such_peer_module", "ct2 rows")
    (tmp_path / "broken_peer.py").write_text("raise ImportError('a broken install')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not common.peer_installed("broken_peer", "broken rows")
    err = capsys.readouterr().err
    assert "ct2 rows: skipped: no_such_peer_module does not import" in err and "broken rows: skipped" in err


@pytest.mark.slow  # among the slowest smoke tests (pytest --durations): kept out of the default suite's 10 minutes
def test_nanogpt_side_by_side_runs_a_length_nanogpt_does_not_save_at(tmp_path):
    """nanoGPT's config saves every 250 iterations and warms up for 100: 60 iterations end on a save of
    their own, and the loss is compared at the same iteration."""
    if not (Path(__file__).resolve().parents[2] / "shared" / "peers" / "nanogpt").is_dir():
        pytest.skip("../shared/peers/nanogpt is not beside the checkout")
    result = _last_json_line("lm_vs_nanogpt.py", "--iters", "60", "--json")
    assert [(row["iters"], row["checkpoint_iter"]) for row in result["rows"]] == [(60, 60), (60, 60)]


@pytest.mark.skipif(not (SHARED_DATA / "multi30k" / "train.en.gz").is_file(), reason="needs ../shared/data/multi30k")
def test_data_scale_prints_its_table(tmp_path):
    out = _last_json_line("data_scale.py", "--sizes", "300", "--vocab-size", "600", "--loader-seconds", "0.1",
                          "--work-dir", str(tmp_path), "--json")
    (row,) = out["rows"]
    assert row["pairs"] == row["kept_pairs"] == 300 and row["ids_mb"] > 0 and row["cold_peak_mb"] > 0
    assert row["tokenize_s"] >= 0 and row["warm_to_first_batch_s"] >= 0 and not list(tmp_path.iterdir())


def test_train_memory_prints_its_table():
    out = _last_json_line("train_memory.py", "--peer", "--config", "tiny", "--precision", "fp32", "--minutes", "0.05",
                          "--every", "0.5", "--max-tokens", "300", "--json")
    for side in ("ours", "torch"):
        assert out[side]["status"] == 0 and out[side]["rows"] and out[side]["peak_mb"] > 0

"""`benchmarks/sst2_phrases.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import subprocess
import sys

import torch

from bench_helpers import BENCHMARKS, LetterTokens, benchmark, labelled_corpus, last_json_line, tiny_encoder


def test_sst2_phrases_finds_each_whole_sentences_labelled_phrases_at_their_token_offsets():
    phrases = benchmark("sst2_phrases")
    texts = ["a bb c", "a bb", "c", "a", "d a", "bb c d e"]
    labels = [1, 0, 1, 1, 0, 1]
    data, skipped = phrases.sentences(texts, labels, LetterTokens(), limit=4)
    # wholes: "a bb c" (a | b b | c), "d a"; "bb c d e" (5 tokens) is over the limit
    assert skipped == 1 and [s.ids for s in data] == [[1, 2, 2, 3], [4, 1]]
    assert data[0].spans == [(0, 1, 1), (0, 3, 0), (0, 4, 1), (3, 4, 1)]  # a, a bb, a bb c, c
    assert data[1].spans == [(0, 2, 0), (1, 2, 1)]  # d a, a


def test_sst2_phrase_span_scores_are_the_classifier_on_each_spans_mean_state():
    """Against the mean of `encode`'s states taken span by span; a text scores the same beside a longer one."""
    phrases = benchmark("sst2_phrases")
    model = tiny_encoder()
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

    phrases = benchmark("sst2_phrases")
    model = tiny_encoder()
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
    out = last_json_line("sst2_phrases.py", "oversample", str(tmp_path / "os"), "--corpus", str(corpus),
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

    corpus, texts, gold = labelled_corpus(tmp_path)
    start = tiny_model(tmp_path / "mlm", "classify")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('task = "classify"\n[model]\ntype = "encoder-only"\n[optim]\nwarmup_steps = 5\n'
                      f'[data]\ncorpus = "{corpus}"\ntrain_split = "train_full"\nvalid_split = "tune"\n'
                      'carve_fraction = 0.5\ntest_split = "dev"\nmax_input_tokens = 8\n[train]\nmax_updates = 6\n')
    out = last_json_line("sst2_phrases.py", "spans", str(start), "--recipe", str(recipe), "--seeds", "2",
                         "--updates", "6", "--batch", "4", "--validate-every", "3", "--threads", "1", "--json")
    (row,) = out["rows"]
    assert row["seed"] == 2 and row["update"] in (3, 6) and row["phrase_weight"] == 1.0
    assert all(0 <= row[s] <= 100 for s in ("tune", "dev"))

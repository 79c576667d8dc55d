"""Classification with the encoder-only model: the reader, the carve, init_from from an MLM model,
and a learning check through `aiayn train` and `aiayn classify`."""

import pytest
import torch

from aiayn.cli import main
from aiayn.data.corpus import CorpusError
from aiayn.models import load_model
from aiayn.tasks.classify import Classifier, ClassifyTask, carve, read_labelled, word_spans
from aiayn.training.config import load_config


def test_reader_header_empty_texts_and_errors(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\ngood film \t1\n \t0\nbad film\t0\n")
    assert read_labelled(path) == (["good film", "bad film"], ["1", "0"], 1)
    path.write_text("good film\t1\nno tab here\n")
    with pytest.raises(CorpusError, match=r"train\.tsv:2: expected text<TAB>label"):
        read_labelled(path)


def test_word_spans_are_the_proper_contiguous_spans():
    assert word_spans("a b c") == {"a", "b", "c", "a b", "b c"}
    assert word_spans("a") == set()


def phrase_file(n_sentences: int) -> list[str]:
    """SST's shape: each sentence, then each of its phrases (word spans) as a line of its own."""
    texts = []
    for i in range(n_sentences):
        sentence = f"s{i} w{i % 7} x{i % 3} end{i}"
        texts += [sentence, f"s{i} w{i % 7}", f"x{i % 3} end{i}", f"w{i % 7}", f"end{i}"]
    return texts


def test_the_carve_holds_out_whole_sentences_and_no_phrase_of_them_is_trained_on():
    texts = phrase_file(200)
    train, held = carve(texts, 0.3)
    held_texts = {texts[i] for i in held}
    assert 30 < len(held) < 90 and len(held_texts) == len(held)  # about 30% of 200 sentences, each once
    assert all(t.startswith("s") and len(t.split()) == 4 for t in held_texts)  # whole sentences only
    for i in train:  # nothing of a held-out sentence is trained on ...
        assert texts[i] not in held_texts and not any(texts[i] in word_spans(h) for h in held_texts)
    shared = {f"w{k}" for k in range(7)} | {f"x{k}" for k in range(3)}  # ... and all of the rest is
    kept = {i for i, t in enumerate(texts) if t not in held_texts and t not in shared
            and not any(t in word_spans(h) for h in held_texts)}
    assert kept <= set(train)
    assert carve(texts, 0.3) == (train, held)  # a hash: the same split every time
    assert carve(texts, 0.0) == (list(range(len(texts))), [])


def test_a_carved_validation_split_comes_from_the_training_file_and_the_test_split_is_read_whole(tmp_path):
    rows = [f"{t}\t{i % 2}" for i, t in enumerate(phrase_file(100))]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.tsv").write_text("a b\t0\nc d\t1\n")
    cfg = load_config(None, ['task="classify"', 'model.type="encoder-only"', f'data.corpus="{tmp_path}"',
                             'data.valid_split="tune"', 'data.test_split="dev"', "data.carve_fraction=0.2", "train.max_updates=1"])
    task = ClassifyTask(cfg)
    (train, _), (tune, _), (dev, _) = task.read("train"), task.read("tune"), task.read("dev")
    assert set(tune) == {phrase_file(100)[i] for i in carve(phrase_file(100), 0.2)[1]} and tune
    assert not set(tune) & set(train) and len(train) + len(tune) < 500
    assert dev == ["a b", "c d"]


def test_the_training_files_empty_texts_are_counted_once_under_a_carve(tmp_path):
    rows = [f"{t}\t{i % 2}" for i, t in enumerate(phrase_file(100))] + ["\t1", " \t0"]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    cfg = load_config(None, ['task="classify"', 'model.type="encoder-only"', f'data.corpus="{tmp_path}"',
                             'data.valid_split="tune"', "data.carve_fraction=0.2", "train.max_updates=1"])
    task = ClassifyTask(cfg)
    (train, _), (tune, _) = task.read("train"), task.read("tune")
    left_out = len(phrase_file(100)) - len(train) - len(tune)  # the texts in neither split: no copies here
    assert task.drops.of("train") == {"empty": 2, "phrase_of_held_out": left_out} and task.drops.of("tune") == {}


def test_the_carve_counts_what_it_leaves_out_of_both_splits(tmp_path):
    """The phrases of held-out sentences (out of training) and a held-out sentence's second copy (out of
    validation) were only logged at INFO: nothing may be dropped uncounted."""
    texts = phrase_file(100)
    held = {texts[i] for i in carve(texts, 0.2)[1]}
    twice = sorted(held)[0]
    rows = [f"{t}\t{i % 2}" for i, t in enumerate(texts)] + [f"{twice}\t1"]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    cfg = load_config(None, ['task="classify"', 'model.type="encoder-only"', f'data.corpus="{tmp_path}"',
                             'data.valid_split="tune"', "data.carve_fraction=0.2", "train.max_updates=1"])
    task = ClassifyTask(cfg)
    (train, _), (tune, _) = task.read("train"), task.read("tune")
    assert task.drops.of("tune") == {"duplicate": 1} and len(tune) == len(held)
    assert task.drops.of("train")["phrase_of_held_out"] == len(texts) - len(train) - len(held)  # the copy is tune's


def write_data(directory, n=200):
    """A separable task: label 1 iff the text holds the word 'good'."""
    lines = {"train": [], "dev": []}
    fillers = "the a film plot actor scene story music".split()
    for i in range(n):
        words = [fillers[(i * 7 + j) % len(fillers)] for j in range(3 + i % 4)]
        label = i % 2
        words.insert(i % len(words), "good" if label else "bad")
        lines["train" if i % 5 else "dev"].append(f"{' '.join(words)}\t{label}")
    for split, rows in lines.items():
        (directory / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")


@pytest.mark.slow  # a learning check of more than a few seconds
def test_a_classifier_learns_a_separable_task_from_an_mlm_start(tmp_path, capsys):
    write_data(tmp_path)
    recipe = tmp_path / "r.toml"
    recipe.write_text("[train]\nmax_updates = 150\n")
    common = ["--set", 'model.type="encoder-only"', "--set", "model.d_model=32", "--set", "model.n_heads=2",
              "--set", "model.n_layers=2", "--set", "model.d_ff=64", "--set", "model.dropout=0.0",
              "--set", f'data.corpus="{tmp_path}"', "--set", 'data.valid_split="dev"', "--set", 'data.vocab_type="symbols"',
              "--set", "data.max_tokens=400", "--set", "optim.warmup_steps=10", "--set", "train.progress=false",
              "--set", "optim.label_smoothing=0.0", "--set", "optim.lr_factor=0.2"]
    assert main(["train", str(recipe), "--set", 'task="mlm"', "--run-dir", str(tmp_path / "mlm"), *common,
                 "--set", "train.max_updates=20"]) == 0
    capsys.readouterr()
    start = ["--set", f'train.init_from="{tmp_path / "mlm" / "model"}"', "--set", f'data.tokenizer="{tmp_path / "mlm" / "model"}"']
    assert main(["train", str(recipe), "--set", 'task="classify"', "--run-dir", str(tmp_path / "cls0"), *common, *start,
                 "--set", "train.max_updates=1", "--set", "optim.lr_factor=1e-12"]) == 0  # one update that moves nothing
    mlm, first = (load_model(tmp_path / run / "model").state_dict() for run in ("mlm", "cls0"))
    shared = [name for name in first if name in mlm]
    assert len(shared) > 20 and all(torch.allclose(first[n], mlm[n], atol=1e-6) for n in shared)  # the MLM's weights
    assert main(["train", str(recipe), "--set", 'task="classify"', "--run-dir", str(tmp_path / "cls"), *common, *start]) == 0
    model = str(tmp_path / "cls" / "model")
    texts = ["the good film", "a bad plot", "music story good actor", "bad"]
    assert [label for label, _ in Classifier.from_pretrained(model).classify(texts)] == ["1", "0", "1", "0"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    capsys.readouterr()
    assert main(["classify", "--model", model, "-i", str(tmp_path / "in.txt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out] == ["1", "0", "1", "0"] and all(float(l.split("\t")[1]) > 0.5 for l in out)


def test_inputs_longer_than_the_models_positions_are_refused_before_training_and_loading(tmp_path):
    """Texts cut to data.max_input_tokens, plus [CLS], must fit model.max_positions: refused when the task
    is built (not at the first long text, updates in) and when a classifier is loaded with a longer cut."""
    from aiayn.config import ConfigError
    from aiayn.models.encoder_only import EncoderOnly

    base = ['task="classify"', 'model.type="encoder-only"', f'data.corpus="{tmp_path}"', "train.max_updates=1"]
    defaults = load_config(None, base)
    assert defaults.data.max_input_tokens == defaults.model.build(64, 64).max_positions - 1  # the defaults fit
    ClassifyTask(defaults)
    with pytest.raises(ConfigError, match="max_input_tokens 128 does not fit the model: its max_positions 128"):
        ClassifyTask(load_config(None, [*base, "data.max_input_tokens=128"]))
    ClassifyTask(load_config(None, [*base, "data.max_input_tokens=128", "model.max_positions=129"]))
    model = EncoderOnly(load_config(None, [*base, "model.max_positions=16"]).model.build(20, 20))
    Classifier(model, None, ["a", "b"], 15)
    with pytest.raises(ConfigError, match="max_input_tokens 16 does not fit"):
        Classifier(model, None, ["a", "b"], 16)

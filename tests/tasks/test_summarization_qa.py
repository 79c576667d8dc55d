"""Summarization and question answering (seed 004 §9.2-9.3): reading, truncation, the carved
bAbI validation split, scores, the inference pipelines and their commands."""

import gzip
import json
import logging
import random

import pytest
import torch

from aiayn.cli import main
from aiayn.config import EOS_ID, TransformerConfig
from aiayn.data.corpus import CorpusError
from aiayn.data.tokenizer import SentencePieceTokenizer, SymbolTokenizer, TokenizerPair
from aiayn.models import Transformer
from aiayn.tasks.qa import QATask
from aiayn.tasks.summarization import SummarizationTask
from aiayn.tasks.qa import QA, SEP, qa_source
from aiayn.tasks.settings import carved
from aiayn.tasks.summarization import Summarizer, lead
from aiayn.training.config import load_config

WORDS = "Mary John Sandra went to the garden kitchen office . Where is ? [SEP]".split()


def write_jsonl(path, rows) -> None:
    """JSON lines (a string row is written as it is), gzipped for a .gz name."""
    with (gzip.open if str(path).endswith(".gz") else open)(path, "wt", encoding="utf-8") as f:
        f.writelines((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def summarization_task(tmp_path, *overrides):
    return SummarizationTask(load_config(None, [
        'task="summarization"', 'data.format="jsonl"', f'data.corpus="{tmp_path}"', 'data.source_field="body"',
        'data.target_field="subject"', 'data.reference_fields=["ann0"]', "train.max_updates=1", *overrides]))


def babi_task(directory, fraction=0.1, *overrides):
    return QATask(load_config(None, [
        'task="qa"', 'data.format="babi"', f'data.corpus="{directory}"', 'data.train_split="qa*_train.txt"',
        'data.valid_split="valid"', f"data.carve_fraction={fraction}", "train.max_updates=1", *overrides]))


# -- reading -------------------------------------------------------------------------------------
def test_summarization_jsonl_fields_extra_references_and_empty_records(tmp_path, caplog):
    write_jsonl(tmp_path / "train.jsonl.gz", [{"body": "Hello  Bob,\nthe meeting\tmoved.", "subject": "Meeting"},
                                              {"body": "", "subject": "empty body"}])
    write_jsonl(tmp_path / "dev.jsonl.gz", [{"body": "a b c", "subject": "Orig", "ann0": "annotated"}])
    task = summarization_task(tmp_path)
    with caplog.at_level(logging.INFO):
        train = task.examples("train")
    assert train.src == ["Hello Bob, the meeting moved."]  # flattened to one line
    assert train.refs == [["Meeting"]]  # the training split has no annotator field: one reference
    assert "train: 1 of 2 examples empty" in caplog.text and "records with an empty field" in caplog.text
    assert task.examples("dev").refs == [["Orig", "annotated"]]  # the training target first
    with pytest.raises(CorpusError, match=r"test\.jsonl: file not found"):
        task.examples("test")


def test_a_bad_jsonl_line_names_the_file_and_line(tmp_path):
    write_jsonl(tmp_path / "train.jsonl.gz", [{"body": "x", "subject": "y"}, "{not json", {"body": "x"}])
    with pytest.raises(CorpusError, match=r"train\.jsonl\.gz:2: not valid JSON"):
        summarization_task(tmp_path).examples("train")
    write_jsonl(tmp_path / "train.jsonl.gz", [{"body": "x", "subject": "y"}, {"body": "x"}])
    with pytest.raises(CorpusError, match=r"train\.jsonl\.gz:2: missing field\(s\) subject"):
        summarization_task(tmp_path).examples("train")


def test_a_carved_summarization_split_is_whole_bodies_disjoint_and_stable(tmp_path):
    bodies = [f"note number {i} about the budget" for i in range(300)]
    rows = [{"body": b, "subject": f"s{i}"} for i, b in enumerate(bodies)] + [{"body": bodies[0], "subject": "dup"}]
    write_jsonl(tmp_path / "train.jsonl.gz", rows)
    write_jsonl(tmp_path / "dev.jsonl.gz", [{"body": "a b", "subject": "c", "ann0": "d"}])
    task = summarization_task(tmp_path, 'data.valid_split="tune"', "data.carve_fraction=0.2")
    train, tune = task.examples("train"), task.examples("tune")
    assert len(train.src) + len(tune.src) == 301 and 30 <= len(tune.src) <= 90
    assert not set(train.src) & set(tune.src)  # a repeated body falls on one side with its twin
    assert [s for s in bodies if carved(s, 0.2)] == sorted(set(tune.src), key=bodies.index)
    assert task.examples("tune").src == tune.src and task.examples("dev").src == ["a b"]  # stable; dev whole
    assert len(summarization_task(tmp_path).examples("train").src) == 301  # no carve: all of it


def test_a_carved_qa_jsonl_split_is_whole_records_by_their_source(tmp_path):
    rows = [{"context": f"fact {i} holds", "question": f"which {i} ?", "answer": str(i)} for i in range(200)]
    write_jsonl(tmp_path / "train.jsonl.gz", rows)
    write_jsonl(tmp_path / "val.jsonl.gz", rows[:3])
    task = QATask(load_config(None, ['task="qa"', 'data.format="jsonl"', f'data.corpus="{tmp_path}"',
                                     'data.valid_split="tune"', "data.carve_fraction=0.25", "data.carve_offset=0.5",
                                     "train.max_updates=1"]))
    train, tune = task.examples("train"), task.examples("tune")
    sources = [qa_source(r["context"], r["question"]) for r in rows]
    assert tune.src == [s for s in sources if carved(s, 0.25, 0.5)] and 20 <= len(tune.src) <= 80
    assert train.src == [s for s in sources if s not in set(tune.src)]
    assert tune.tgt == [r["answer"] for r in rows if carved(qa_source(r["context"], r["question"]), 0.25, 0.5)]


@pytest.mark.parametrize("task", ["qa", "summarization", "classify"])
def test_a_carve_needs_a_validation_split_to_hold_out_into(task):
    from aiayn.config import ConfigError

    with pytest.raises(ConfigError, match="data.carve_fraction = 0.1 needs data.valid_split"):
        load_config(None, [f'task="{task}"', 'data.valid_split=""', "data.carve_fraction=0.1", "train.max_updates=1"])


def test_empty_parallel_summarization_pairs_are_counted(tmp_path):
    (tmp_path / "train.src").write_text("a b c\n\nd e f\n")
    (tmp_path / "train.tgt").write_text("a\nb\n\n")
    task = summarization_task(tmp_path, 'data.format="parallel"')
    assert task.examples("train").src == ["a b c"]
    assert task.drops.of("train") == {"empty": 2}


def test_a_source_that_is_a_list_is_an_error_naming_its_line(tmp_path):
    """A list of strings passed the reader (a list is allowed for references) and the task failed on it later,
    in a traceback ("'list' object has no attribute 'split'")."""
    write_jsonl(tmp_path / "train.jsonl.gz", [{"body": "a b", "subject": "c"}, {"body": ["p1", "p2"], "subject": "d"}])
    with pytest.raises(CorpusError, match=r"train.jsonl.gz:2: field 'body' must be a string"):
        summarization_task(tmp_path).examples("train")


def stories(n: int, unique: bool = False) -> str:
    """n two-fact bAbI stories, one question each, numbered as the real files are: 9 stories repeated, or
    with `unique` each its own (its first person's name numbered)."""
    people, places = ["Mary", "John", "Sandra"], ["garden", "kitchen", "office"]
    lines = []
    for i in range(n):
        who, where = people[i % 3] + (str(i) if unique else ""), places[(i // 3) % 3]
        lines += [f"1 {who} went to the {where}.", f"2 {people[(i + 1) % 3]} went to the office.",
                  f"3 Where is {who}? \t{where}\t1"]
    return "\n".join(lines) + "\n"


def test_the_carved_validation_split_is_whole_stories_disjoint_and_stable(tmp_path):
    """Disjoint in text too: qa2's 400 stories are 9 repeated (as bAbI's generator repeats some), and a training
    question equal to a carved one was trained on (6% of the real carve) until it was left out, counted."""
    (tmp_path / "qa1_single_train.txt").write_text(stories(400, unique=True))
    (tmp_path / "qa2_two_train.txt").write_text(stories(400))
    task = babi_task(tmp_path)
    train, valid = task.examples(task.data.train_split), task.examples("valid")
    assert not set(train.src) & set(valid.src)
    dropped = task.drops.of(task.data.train_split)["duplicate"]
    assert len(train.src) + len(valid.src) + dropped == 800
    assert 2 not in train.groups and train.groups.count(1) + valid.groups.count(1) == 400  # qa1's are all kept
    for t in (1, 2):  # about 10% of the stories of every task
        assert 20 <= valid.groups.count(t) <= 60
    expected = [i for i in range(400) if carved(f"qa1_single_train.txt:{i}", 0.1)]
    assert len([g for g in valid.groups if g == 1]) == len(expected)
    again = babi_task(tmp_path).examples("valid")
    assert again.src == valid.src  # the same split every time: a hash, not a draw
    assert valid.src[0].endswith(f" {SEP} Where is {valid.src[0].split(' ')[0]} ?")


def test_a_glob_that_matches_nothing_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match=r"qa\*_train\.txt: no bAbI file matches"):
        babi_task(tmp_path).examples("qa*_train.txt")


# -- the source and its truncation -----------------------------------------------------------------
def test_sep_is_one_piece_of_a_trained_vocabulary():
    texts = [qa_source("Mary went to the garden. John went to the kitchen.", "Where is Mary?")] * 50
    tok = SentencePieceTokenizer.train(texts, vocab_size=300, user_symbols=(SEP,))
    pieces = tok.pieces(tok.encode(texts[0]))
    assert pieces.count(SEP) == 1 and all(p == SEP or "[" not in p for p in pieces)


def tiny_tokenizers() -> TokenizerPair:
    return TokenizerPair.shared(SymbolTokenizer(WORDS))


@pytest.mark.parametrize("kind,kept", [("summarization", "Mary went to"), ("qa", "[SEP] Where is Mary ?")])
def test_over_long_sources_are_truncated_at_the_task_end_and_counted(tmp_path, caplog, kind, kept):
    rows = [{"body": "Mary went to the garden . John went to the office . [SEP] Where is Mary ?", "subject": "garden"},
            {"body": "Mary went", "subject": "x"}]
    write_jsonl(tmp_path / "train.jsonl.gz", rows)
    task = summarization_task(tmp_path, "data.max_input_tokens=4")
    if kind == "qa":
        task.keep = "end"  # QATask's end; the same reader keeps the test on one file format
    task.tokenizers = tiny_tokenizers()
    with caplog.at_level(logging.INFO):
        data = task.dataset("train")
    assert "1 of 2 examples truncated (sources over 4 tokens" in caplog.text
    batch = data.collate([0, 1])
    assert batch.src.shape[1] == 4 and batch.src[0, -1] == EOS_ID  # 3 ids + EOS
    assert task.tokenizers.src.decode(batch.src[0].tolist()) == " ".join(kept.split()[-3:] if kind == "qa" else kept.split())


def test_lead_baseline():
    assert lead("Please  review the\nattached contract today.") == "Please review the attached"


# -- scores ------------------------------------------------------------------------------------
def test_summarization_report_scores_first_reference_and_all(tmp_path):
    from aiayn import metrics
    from aiayn.tasks.seq2seq import Examples

    ex = Examples(["quarterly budget review meeting today please come"], [["Budget meeting", "meeting on budget"]])
    report = summarization_task(tmp_path).report(["the budget meeting"], ex)
    direct_first = metrics.rouge(["the budget meeting"], [["Budget meeting"]])
    assert report["model_first_reference"]["rouge1"] == round(direct_first["rouge1"].score, 2)
    assert report["model_all_references"]["rouge2"] >= report["model_first_reference"]["rouge2"]
    for n, words in ((4, "quarterly budget review meeting"), (8, "quarterly budget review meeting today please come")):
        lead_r1 = metrics.rouge([words], [["Budget meeting", "meeting on budget"]])["rouge1"]
        assert report[f"lead{n}_all_references"]["rouge1"] == round(lead_r1.score, 2)


def test_qa_scores_include_babi_error_rates(tmp_path):
    from aiayn.tasks.seq2seq import Examples

    ex = Examples(["s1", "s2", "s3", "s4"], [["garden"], ["north,west"], ["office"], ["yes"]], [1, 1, 19, 19])
    scores = babi_task(tmp_path).scores(["garden", "north,west", "kitchen", "yes"], ex)
    assert scores["exact_match"] == 75.0
    assert (scores["babi_mean_error"], scores["babi_failed_tasks"]) == (25.0, 1.0)  # task 19: 50% error


# -- inference: the pipelines and their commands --------------------------------------------------
def model_dir(tmp_path, task) -> str:
    """A random tiny model saved by `task` (config, weights, tokenizers, task.json)."""
    torch.manual_seed(0)
    task.tokenizers = tiny_tokenizers()
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=4 + len(WORDS))).save_pretrained(tmp_path)
    task.save_extras(tmp_path)
    return str(tmp_path)


CONTEXTS = ["Mary went to the garden .", "John went to the office . Sandra went to the kitchen .", "Mary went"]
QUESTIONS = ["Where is Mary ?", "Where is Sandra ?", "Where is John ?"]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_qa_and_summarizer_batched_equal_one_call_per_input(tmp_path, method):
    qa = QA.from_pretrained(model_dir(tmp_path / "qa", babi_task(tmp_path)), max_input_tokens=6)
    kwargs = {"method": method, "max_len_b": 5}
    batched = qa.answer(CONTEXTS, QUESTIONS, **kwargs)
    assert batched == [qa.answer(c, q, **kwargs) for c, q in zip(CONTEXTS, QUESTIONS)]
    assert qa.translator.keep == "end"
    summarizer = Summarizer.from_pretrained(model_dir(tmp_path / "sum", summarization_task(tmp_path)))
    batched = summarizer.summarize(CONTEXTS, **kwargs)
    assert batched == [summarizer.summarize([c], **kwargs)[0] for c in CONTEXTS]


def test_a_pipeline_refuses_another_tasks_model(tmp_path):
    directory = model_dir(tmp_path, babi_task(tmp_path))
    assert json.loads((tmp_path / "task.json").read_text())["task"] == "qa"
    with pytest.raises(ValueError, match="a qa model .*not a summarization model"):
        Summarizer.from_pretrained(directory)


def test_answer_and_summarize_commands(tmp_path, capsys):
    qa_dir = model_dir(tmp_path / "qa", babi_task(tmp_path))
    fast = ["--method", "greedy", "--max-len-b", "3"]
    assert main(["answer", "--model", qa_dir, "--context", CONTEXTS[0], "--question", QUESTIONS[0], *fast]) == 0
    expected = QA.from_pretrained(qa_dir).answer(CONTEXTS[0], QUESTIONS[0], method="greedy", max_len_b=3)
    assert capsys.readouterr().out == expected + "\n"
    questions = tmp_path / "q.jsonl"
    write_jsonl(questions, [{"context": c, "question": q} for c, q in zip(CONTEXTS, QUESTIONS)])
    out = tmp_path / "a.jsonl"
    assert main(["answer", "--model", qa_dir, "-i", str(questions), "-o", str(out), *fast]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["question"] for r in rows] == QUESTIONS and rows[0]["prediction"] == expected
    write_jsonl(questions, [{"context": "x", "question": "y"}, {"context": "x"}])
    assert main(["answer", "--model", qa_dir, "-i", str(questions), *fast]) == 2
    assert "q.jsonl:2: field 'question' must be a non-empty string" in capsys.readouterr().err
    assert main(["summarize", "--model", qa_dir, *fast]) == 2
    assert "a qa model, which `aiayn summarize` does not run; use `aiayn answer`" in capsys.readouterr().err


def test_evaluate_a_summarization_model_scores_rouge_on_its_summaries(tmp_path, capsys):
    from aiayn import metrics

    sum_dir = model_dir(tmp_path / "sum", summarization_task(tmp_path))
    src, ref, saved = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "hyp.txt"
    src.write_text("".join(c + "\n" for c in CONTEXTS))
    ref.write_text("Where Mary went\nSandra kitchen\nWhere\n")  # this random model says "Where" a lot
    fast = ["--method", "greedy", "--max-len-b", "3"]
    assert main(["evaluate", "--model", sum_dir, "--src", str(src), "--ref", str(ref), "--save-hyp", str(saved),
                 "--json", *fast]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summaries = Summarizer.from_pretrained(sum_dir).summarize(CONTEXTS, method="greedy", max_len_b=3)
    assert saved.read_text().splitlines() == summaries  # decoded by the summarization pipeline
    assert result["metric"] == "rouge"  # the model's task chose it
    assert result["rougeL"] == round(metrics.rouge(summaries, ref.read_text().splitlines())["rougeL"].score, 2) > 0
    qa_dir = model_dir(tmp_path / "qa", babi_task(tmp_path))
    assert main(["evaluate", "--model", qa_dir, "--src", str(src), "--ref", str(ref)]) == 2
    assert "src.txt:1: not a JSON object" in capsys.readouterr().err  # a QA model reads the lines `aiayn answer` reads
    questions = tmp_path / "q.jsonl"
    write_jsonl(questions, [{"context": c, "question": q} for c, q in zip(CONTEXTS, QUESTIONS)])
    assert main(["evaluate", "--model", qa_dir, "--src", str(questions), "--ref", str(ref), "--json", *fast]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    answers = QA.from_pretrained(qa_dir).answer(CONTEXTS, QUESTIONS, method="greedy", max_len_b=3)
    assert result["metric"] == "squad"
    assert result["f1"] == round(metrics.token_f1(answers, [[r] for r in ref.read_text().splitlines()]).score, 2)


def test_the_qa_task_gives_a_sentence_model_its_end_ids(tmp_path):
    task = babi_task(tmp_path, 0.1, 'model.source_units="sentences"', 'model.preset="tiny"')
    task.tokenizers = tiny_tokenizers()
    _, config = task.model_spec()
    vocab = task.tokenizers.src
    assert config.sentence_ends == tuple(sorted(vocab.encode(".") + vocab.encode("?")))
    tokens = babi_task(tmp_path, 0.1, 'model.preset="tiny"')
    tokens.tokenizers = task.tokenizers
    assert tokens.model_spec()[1].sentence_ends == ()  # a model of tokens has no use for them


def varied_stories(n: int) -> str:
    """n two-fact stories drawn from 2,160 (who, where, the other person, where they went, which fact first): the
    carved split asks questions of stories the model did not train on (a training copy of one is left out)."""
    rng = random.Random(0)
    people = ["Mary", "John", "Sandra", "Daniel", "Fred", "Bill"]
    places = ["garden", "kitchen", "office", "hallway", "bedroom", "bathroom"]
    lines = []
    for _ in range(n):
        who, other = rng.sample(people, 2)
        where, there = rng.choice(places), rng.choice(places)
        facts = [f"{who} went to the {where}.", f"{other} went to the {there}."]
        if rng.random() < 0.5:
            facts.reverse()
        lines += [f"1 {facts[0]}", f"2 {facts[1]}", f"3 Where is {who}? \t{where}\t{1 + facts.index(f'{who} went to the {where}.')}"]
    return "\n".join(lines) + "\n"


@pytest.mark.slow  # a learning check of more than a few seconds
def test_a_sentence_model_learns_which_fact_answers_the_question(tmp_path):
    """Two facts per story, about two people; the answer is the place in the fact about the one asked."""
    (tmp_path / "qa1_single_train.txt").write_text(varied_stories(1200))
    recipe = tmp_path / "r.toml"
    recipe.write_text("[train]\nmax_updates = 800\n")
    sets = ['task="qa"', 'data.format="babi"', f'data.corpus="{tmp_path}"', 'data.train_split="qa*_train.txt"',
            'data.valid_split="valid"', "data.carve_fraction=0.1", 'data.test_split="valid"', 'data.vocab_type="symbols"',
            "data.max_tokens=600", 'model.preset="tiny"', "model.d_model=64", "model.d_ff=128", "model.dropout=0.0",
            "model.norm_first=true", 'model.source_units="sentences"', 'model.source_positions="end"',
            "optim.warmup_steps=50", "optim.lr_factor=0.2", "train.progress=false", "train.validate_every=0",
            'decode.method="greedy"', "decode.max_len_a=0.0", "decode.max_len_b=3"]
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "run"), *[x for s in sets for x in ("--set", s)]]) == 0
    scores = json.loads((tmp_path / "run" / "test_scores.json").read_text())
    assert scores["exact_match"] >= 95.0, scores

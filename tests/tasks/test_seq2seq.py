"""`aiayn.tasks.seq2seq.Seq2SeqTask`: what every text-to-text task shares."""

from aiayn.distributed import SINGLE
from test_drops import finished_model
from test_summarization_qa import summarization_task, write_jsonl


def test_the_test_decode_reports_its_total_so_a_bar_can_estimate(tmp_path):
    rows = [{"body": f"a b c {w}", "subject": w} for w in "defgh"]
    write_jsonl(tmp_path / "train.jsonl.gz", rows)
    write_jsonl(tmp_path / "test.jsonl.gz", rows[:3])
    task = summarization_task(tmp_path, 'data.vocab_type="symbols"', 'data.test_split="test"', 'data.valid_split=""',
                              'decode.method="greedy"', "decode.max_len_b=2")
    task.prepare(tmp_path / "run", SINGLE)
    calls = []
    task.test(finished_model(task, tmp_path / "run" / "model"), "cpu", progress=lambda n, total: calls.append((n, total)))
    assert sum(n for n, _ in calls) == 3 and {total for _, total in calls} == {3}

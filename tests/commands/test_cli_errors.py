"""`aiayn.cli.main`: every expected failure is one line `aiayn <command>: error: ...` on stderr and
exit code 2, with no traceback (unless -v); a closed stdout ends the output quietly (141)."""

import io
import re
import subprocess
import sys

import pytest
import torch

from aiayn.cli import main
from aiayn.config import ConfigError
from aiayn.io import LockedError

FIXTURE = None  # a tiny model directory that knows the symbols a..j, made once for this module below


@pytest.fixture(scope="module", autouse=True)
def _tiny_model_dir(tmp_path_factory):
    global FIXTURE
    from aiayn.config import TransformerConfig
    from aiayn.data.synthetic import symbols
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
    from aiayn.models import Transformer

    torch.manual_seed(0)
    FIXTURE = tmp_path_factory.mktemp("model")
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=14)).save_pretrained(FIXTURE)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(symbols(10))), FIXTURE)
FAST = ["--method", "greedy", "--max-len-b", "3"]


def with_stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))


def one_error_line(err: str, command: str = "translate") -> str:
    """The message of the single error line that is all of `err`."""
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    prefix = f"aiayn {command}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix):-1]


def raising(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


LOAD = "aiayn.tasks.load_pipeline"  # where every command loads its model (through commands.door.load)


@pytest.mark.parametrize("error,message", [
    (PermissionError(13, "Permission denied", "/runs/x/checkpoint.pt"), "/runs/x/checkpoint.pt: Permission denied"),
    (OSError(28, "No space left on device"), "No space left on device"),
    (RuntimeError("PytorchStreamWriter failed writing file data/0"), "PytorchStreamWriter failed writing file data/0"),
    (LockedError("runs/x is in use by another process (PID 42)"), "runs/x is in use by another process (PID 42)"),
    (ConfigError("warmup_steps must be an integer, got 10.5"), "warmup_steps must be an integer, got 10.5"),
])
def test_expected_failures_are_one_line(error, message, monkeypatch, capsys):
    monkeypatch.setattr(LOAD, raising(error))
    assert main(["translate", str(FIXTURE)]) == 2
    assert one_error_line(capsys.readouterr().err) == message


def test_verbose_shows_the_traceback(monkeypatch):
    monkeypatch.setattr(LOAD, raising(LockedError("in use")))
    with pytest.raises(LockedError, match="in use"):
        main(["-v", "translate", str(FIXTURE)])


def test_interrupt_exits_130(monkeypatch, capsys):
    monkeypatch.setattr(LOAD, raising(KeyboardInterrupt()))
    assert main(["translate", str(FIXTURE)]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_missing_model_directory(tmp_path, capsys):
    assert main(["translate", str(tmp_path / "nope")]) == 2
    assert str(tmp_path / "nope") in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("from_file", [True, False])
def test_unwritable_output_path(from_file, tmp_path, monkeypatch, capsys):
    """An output path under a regular file is an error that names the file, before any translating."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    inputs = ["-i", str(src)] if from_file else []
    with_stdin(monkeypatch, "a b\n")
    monkeypatch.setattr(LOAD, raising(AssertionError("translated before checking")))
    assert main(["translate", str(FIXTURE), *inputs, "-o", str(blocker / "sub" / "out.txt"), *FAST]) == 2
    assert one_error_line(capsys.readouterr().err) == f"{blocker}: Not a directory"


def test_read_only_output_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("os.access", lambda path, mode: False)  # chmod cannot stop root
    assert main(["translate", str(FIXTURE), "-o", str(tmp_path / "out.txt")]) == 2
    assert one_error_line(capsys.readouterr().err) == f"{tmp_path}: Permission denied"


@pytest.mark.parametrize("command", ["translate", "plot"])
def test_a_one_stack_model_without_task_json_is_one_line(command, tmp_path, monkeypatch, capsys):
    """Without task.json a directory is read as a translation model; a decoder-only one cannot be
    one, and says so, before anything is loaded (it was an AttributeError's traceback)."""
    from aiayn.data.synthetic import symbols
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
    from aiayn.models import DecoderOnly, DecoderOnlyConfig

    DecoderOnly(DecoderOnlyConfig(vocab_size=14, d_model=16, n_heads=2, n_layers=1, d_ff=32)).save_pretrained(tmp_path)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(symbols(10))), tmp_path)
    with_stdin(monkeypatch, "a b\n")
    args = ["translate", str(tmp_path)] if command == "translate" else [
        "plot", "attention", "--model", str(tmp_path), "--sentence", "a b", "-o", str(tmp_path / "a.png")]
    assert main(args) == 2
    assert one_error_line(capsys.readouterr().err, command) == (
        f"{tmp_path}: no task.json, so read as a translation model, which is an encoder-decoder or rnn model; "
        "this one is decoder-only (config.json)")


def test_cuda_without_a_gpu_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["translate", str(FIXTURE), "--device", "cuda"]) == 2
    assert "no CUDA device is available" in one_error_line(capsys.readouterr().err)


class ClosedPipe:
    """A stdout whose reader has gone."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    writelines = write

    def flush(self):
        pass


def test_closed_stdout_ends_quietly(monkeypatch, capsys):
    with_stdin(monkeypatch, "a b c\nd e\n")
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["translate", str(FIXTURE), *FAST]) == 141
    said = [line for line in re.split(r"[\r\n]", capsys.readouterr().err) if line.strip()]
    assert all(re.fullmatch(r"\d+line \[.*\]", line) for line in said), said  # the lines counted, no complaint


def test_closed_stdout_pipe_in_a_real_process():
    """As in `aiayn translate ... | head -1`: the interpreter's exit flush must not complain either."""
    proc = subprocess.Popen([sys.executable, "-m", "aiayn", "translate", str(FIXTURE), *FAST],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written
    _, err = proc.communicate(b"a b c\nd e\n", timeout=60)
    assert proc.returncode == 141 and b"Traceback" not in err and b"Exception ignored" not in err, err


def test_an_output_path_that_is_a_directory_fails_before_translating(tmp_path, monkeypatch, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    monkeypatch.setattr(LOAD, raising(AssertionError("translated before checking")))
    assert main(["translate", str(FIXTURE), "-i", str(src), "-o", str(tmp_path), *FAST]) == 2
    assert one_error_line(capsys.readouterr().err) == f"{tmp_path}: Is a directory"


@pytest.mark.parametrize("flags,message", [
    (["--max-input-tokens", "0"], "argument --max-input-tokens: must be at least 2, got 0"),
    (["--batch-tokens", "-3"], "argument --batch-tokens: must be at least 2, got -3"),
])
def test_bad_numbers_are_usage_errors_naming_the_flag(flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["translate", str(FIXTURE), *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_sampling_flags_without_sampling_are_an_error_not_ignored(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    assert main(["translate", str(FIXTURE), "-i", str(src), "--method", "beam", "--temperature", "50"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the progress bar's first draw
    assert last.startswith("aiayn translate: error: temperature set for sampling, but the method is 'beam'")


def test_a_pipe_is_read_as_an_input_file(tmp_path, capsys):
    """A FIFO (what <(...) and /dev/stdin are) is read as a file is: not "file not found"."""
    import os
    import threading

    fifo = tmp_path / "hyp"
    os.mkfifo(fifo)
    (tmp_path / "ref.txt").write_text("a b c d e f\n")
    writer = threading.Thread(target=lambda: fifo.write_text("a b c d e f\n"), daemon=True)
    writer.start()
    assert main(["evaluate", "--hyp", str(fifo), "--ref", str(tmp_path / "ref.txt"), "--json"]) == 0
    writer.join(timeout=10)
    assert '"bleu": 100.0' in capsys.readouterr().out


def test_an_unknown_sacrebleu_tokenizer_is_refused_before_decoding(tmp_path, monkeypatch, capsys):
    (tmp_path / "ref.txt").write_text("a b\n")
    monkeypatch.setattr(LOAD, raising(AssertionError("decoded before checking")))
    assert main(["evaluate", "--model", str(FIXTURE), "--src", str(tmp_path / "ref.txt"),
                 "--ref", str(tmp_path / "ref.txt"), "--tokenize", "bogus"]) == 2
    assert "--tokenize bogus: not a sacreBLEU tokenizer" in one_error_line(capsys.readouterr().err, "evaluate")


def test_the_task_metric_takes_the_tokenizer_too(tmp_path, capsys):
    """--model without --metric scores with the task's metric (BLEU here) and --tokenize's tokenizer."""
    (tmp_path / "src.txt").write_text("a b\n")
    assert main(["evaluate", "--model", str(FIXTURE), "--src", str(tmp_path / "src.txt"), "--ref",
                 str(tmp_path / "src.txt"), "--tokenize", "char", "--json", *FAST]) == 0
    assert "tok:char" in capsys.readouterr().out


def test_serve_refuses_a_port_out_of_range(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", str(FIXTURE), "--port", "99999"])
    assert e.value.code == 2 and "argument --port: must be from 0 to 65535, got 99999" in capsys.readouterr().err


def test_average_names_a_missing_checkpoint_and_a_checkpoints_folder_without_last(tmp_path, capsys):
    assert main(["average", str(tmp_path / "nope"), "-o", str(tmp_path / "out")]) == 2
    assert one_error_line(capsys.readouterr().err, "average") == f"{tmp_path / 'nope'}: no such checkpoint directory"
    with pytest.raises(SystemExit):
        main(["average", str(tmp_path), "--last", "0", "-o", str(tmp_path / "out")])
    assert "argument --last: must be at least 1, got 0" in capsys.readouterr().err


def test_resume_with_another_run_dir_is_one_line(tmp_path, capsys, monkeypatch):
    from aiayn.training.config import load_config, save_config

    run = tmp_path / "run"
    save_config(load_config(None, ["train.max_updates=1", 'data.vocab_type="symbols"', f"train.run_dir={run}"]), run)
    assert main(["train", "--resume", str(run), "--run-dir", str(tmp_path / "other")]) == 2
    assert f"train.run_dir) {tmp_path / 'other'} points elsewhere" in one_error_line(capsys.readouterr().err, "train")
    monkeypatch.setattr("aiayn.training.pipeline.train", raising(RuntimeError("resumed")))  # the same run: on to it
    assert main(["train", "--resume", str(run), "--run-dir", f"{run}/"]) == 2
    assert one_error_line(capsys.readouterr().err, "train") == "resumed"


def test_a_missing_extra_is_a_one_line_error(monkeypatch, capsys):
    """Without fastapi `aiayn serve` says which extra to install, in one line (no traceback, exit 2)."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else find_spec(name, *a))
    assert main(["serve", str(FIXTURE)]) == 2
    assert capsys.readouterr().err == "aiayn serve: error: aiayn serve needs the serve extra: pip install 'aiayn[serve]'\n"

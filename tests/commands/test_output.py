"""`-o PATH` writes to what PATH is: a regular file is replaced atomically, anything else is written
through (a symlink's target, a FIFO, a character device, "-" for stdout). Through `aiayn.cli.main`."""

import os
import stat
import threading

import pytest

from aiayn.cli import main
from aiayn.decoding.translator import Translator

LINES = ["a b c", "d e f g", "k", "b b b b"]
FAST = ["--beam-size", "2", "--max-len-b", "4"]


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def expected(model_dir) -> str:
    return "".join(line + "\n" for line in Translator.from_pretrained(model_dir).translate(LINES, beam_size=2, max_len_b=4))


def translate_to(model_dir, src, out) -> int:
    return main(["translate", str(model_dir), "-i", str(src), "-o", str(out), *FAST])


def test_a_regular_file_is_replaced(model_dir, src, tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n" * 100)
    assert translate_to(model_dir, src, out) == 0
    assert out.read_text(encoding="utf-8") == expected(model_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]  # no temporary left


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_symlink_writes_its_target_and_stays_a_link(model_dir, src, tmp_path, command):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target.name)
    if command == "translate":
        assert translate_to(model_dir, src, link) == 0
    else:
        assert main(["evaluate", "--model", str(model_dir), "--src", str(src), "--ref", str(src),
                     "--save-hyp", str(link), *FAST]) == 0
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_text(encoding="utf-8") == expected(model_dir)


def test_a_dangling_symlink_creates_its_target(model_dir, src, tmp_path):
    target, link = tmp_path / "new.txt", tmp_path / "link.txt"
    link.symlink_to(target.name)
    assert translate_to(model_dir, src, link) == 0
    assert link.is_symlink() and target.read_text(encoding="utf-8") == expected(model_dir)


def read_fifo_in_thread(fifo):
    """Start a reader of `fifo`; return (received chunks, thread, keeper fd). The test holds the keeper, a
    read-write end, so that neither side's open blocks; the reader sees EOF once the keeper and the
    command have both closed their ends (and, if the command never opened the FIFO, right after the keeper)."""
    keeper = os.open(fifo, os.O_RDWR)  # Linux: does not block, and counts as a writer
    received: list[bytes] = []

    def read():
        with open(fifo, "rb") as f:
            received.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return received, thread, keeper


def test_a_fifo_is_read_in_full_by_its_reader(model_dir, src, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received, thread, keeper = read_fifo_in_thread(fifo)
    try:
        assert translate_to(model_dir, src, fifo) == 0
    finally:
        os.close(keeper)
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a regular file renamed over it
    assert received == [expected(model_dir).encode("utf-8")]


def test_a_character_device_stays_a_character_device(model_dir, src, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the null device, made here, never /dev's
    except PermissionError:
        pytest.skip("this container may not make device nodes (no CAP_MKNOD)")
    assert translate_to(model_dir, src, null) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)


def test_dash_is_stdout(model_dir, src, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert translate_to(model_dir, src, "-") == 0
    assert capsys.readouterr().out == expected(model_dir)
    assert not (tmp_path / "-").exists()


def test_dash_is_stdout_when_reading_stdin_too(model_dir, src, tmp_path, monkeypatch, capsys):
    import io
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
    capsys.readouterr()
    assert main(["translate", str(model_dir), "-o", "-", *FAST]) == 0  # streamed in chunks, not through write_lines
    out, err = capsys.readouterr()
    assert out == expected(model_dir)
    assert f"{len(LINES)}line" in err.replace(" ", "")  # piped in, the lines are counted on stderr as -i FILE's are
    assert not (tmp_path / "-").exists()


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(model_dir, src, tmp_path, capsys):
    """-o naming the -i file (or a link to it), or evaluate's --save-hyp naming --src or a --ref: refused
    before any decoding, the input as it was."""
    link = tmp_path / "link.txt"
    link.symlink_to(src)
    before = src.read_text()
    for out in (src, link):
        assert translate_to(model_dir, src, out) == 2
        assert f"{out}: is also an input ({src})" in capsys.readouterr().err
    ref = tmp_path / "ref.txt"
    ref.write_text("c b a\n" * len(LINES))
    for saved in (src, ref):
        assert main(["evaluate", "--model", str(model_dir), "--src", str(src), "--ref", str(ref),
                     "--save-hyp", str(saved), *FAST]) == 2
        assert "is also an input" in capsys.readouterr().err
    assert src.read_text() == before and ref.read_text() == "c b a\n" * len(LINES)


def test_output_path_slips_are_named(model_dir, src, tmp_path, capsys):
    """A full device names the path (not a bare "No space left on device"); "dir/" for a folder that is
    not there is not written as a file "dir"; an empty path is refused."""
    if os.path.exists("/dev/full"):
        assert translate_to(model_dir, src, "/dev/full") == 2
        assert "/dev/full: No space left on device" in capsys.readouterr().err
    assert translate_to(model_dir, src, f"{tmp_path / 'newout'}/") == 2
    assert f"{tmp_path / 'newout'}/: Not a directory" in capsys.readouterr().err
    assert not (tmp_path / "newout").exists()
    assert translate_to(model_dir, src, "") == 2
    assert "the output path is empty" in capsys.readouterr().err

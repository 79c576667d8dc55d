import os
import stat
import threading

import pytest

from aiayn.io import atomic_write, write_output


def test_atomic_write_replaces_on_success(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with atomic_write(target) as tmp:
        tmp.write_text("new")
        assert target.read_text() == "old"  # nothing visible until the rename
    assert target.read_text() == "new"
    assert list(tmp_path.iterdir()) == [target]


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]  # no temporary left behind


def test_saved_files_get_the_usual_mode(tmp_path):
    import os

    with atomic_write(tmp_path / "f.txt") as tmp:
        tmp.write_text("x")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_write_output_through_a_fifo_larger_than_its_buffer(tmp_path):
    """1 MiB through a FIFO (whose buffer holds 64 KiB) arrives whole at the reader."""
    fifo, text = tmp_path / "out", "0123456789abcdé\n" * 70_000
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_output(fifo, text)
    reader.join(timeout=30)
    assert received == [text.encode("utf-8")] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_write_output_follows_a_chain_of_links_to_a_regular_file(tmp_path):
    (tmp_path / "real").write_text("old")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("real")
    write_output(tmp_path / "a", "new")
    assert (tmp_path / "real").read_text() == "new"
    assert os.readlink(tmp_path / "a") == "b" and os.readlink(tmp_path / "b") == "real"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "real"]


def test_write_output_to_a_directory_is_an_error(tmp_path):
    with pytest.raises(IsADirectoryError):
        write_output(tmp_path, "x")

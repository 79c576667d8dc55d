import os
import stat
import threading

import pytest

from aiayn.io import atomic_dir, atomic_write, output_file, read_utf8, write_output


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


def through_a_fifo(fifo, data) -> bytes:
    """What a reader of the new FIFO `fifo` receives while write_output writes `data` to it."""
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_output(fifo, data)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO
    return received[0]


def test_write_output_through_a_fifo_larger_than_its_buffer(tmp_path):
    """1 MiB through a FIFO (whose buffer holds 64 KiB) arrives whole at the reader."""
    text = "0123456789abcdé\n" * 70_000
    assert through_a_fifo(tmp_path / "out", text) == text.encode("utf-8")


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


def test_a_replaced_file_keeps_its_mode(tmp_path):
    """A private file stays private when a command's -o (or any save) replaces it."""
    path = tmp_path / "private.txt"
    path.write_text("old")
    path.chmod(0o600)
    write_output(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o600


def test_output_file_leaves_the_old_file_when_the_block_fails(tmp_path):
    """`translate` reading stdin writes its -o through output_file: killed or failing, it has not
    emptied the old file; a missing directory is made."""
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), output_file(path) as f:
        f.write("half")
        f.flush()
        assert path.read_text() == "old\n"  # nothing of the new output under the name yet
        raise RuntimeError("killed")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with output_file(tmp_path / "new" / "dir" / "out.txt") as f:
        f.write("line\n")
    assert (tmp_path / "new" / "dir" / "out.txt").read_text() == "line\n"


def test_bytes_through_a_link_and_a_fifo(tmp_path):
    """Binary output (a plot's PNG) follows write_output's rules: a link stays a link, a FIFO's reader gets it all."""
    data = bytes(range(256)) * 1000
    (tmp_path / "real.png").write_bytes(b"old")
    (tmp_path / "link.png").symlink_to("real.png")
    write_output(tmp_path / "link.png", data)
    assert (tmp_path / "real.png").read_bytes() == data and os.readlink(tmp_path / "link.png") == "real.png"
    assert through_a_fifo(tmp_path / "fifo", data) == data


def test_atomic_dir_fills_a_linked_directory_and_keeps_the_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "old.txt").write_text("old")
    (tmp_path / "out").symlink_to("real")
    with atomic_dir(tmp_path / "out") as tmp:
        (tmp / "new.txt").write_text("new")
    assert os.readlink(tmp_path / "out") == "real"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "real"]  # no temporary, no aside copy left
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "out") as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("failed")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "real"]


def test_read_utf8_names_the_file_and_line_of_a_bad_byte(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"a = 1\nb = 'caf\xe9'\n")
    with pytest.raises(ValueError, match=r"config\.toml:2: invalid UTF-8"):
        read_utf8(path)


@pytest.mark.parametrize("name", ["/dev/fd/{fd}", "/proc/self/fd/{fd}", "/dev/stdout"])
def test_a_path_to_an_open_file_descriptor_writes_through_it(tmp_path, name, monkeypatch):
    """`-o /dev/stdout >> log` appended nothing: the log was resolved through /proc/self/fd/1 and replaced
    by a rename (and a pipe resolved to a made-up "pipe:[N]" path failed after all the work)."""
    from aiayn.commands.door import check_writable

    log = tmp_path / "log"
    log.write_text("OLD\n")
    inode = log.stat().st_ino
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        if name == "/dev/stdout":
            saved = os.dup(1)
            os.dup2(fd, 1)
        path = name.format(fd=fd)
        try:
            check_writable(path)
            write_output(path, "new\n")
        finally:
            if name == "/dev/stdout":
                os.dup2(saved, 1)
                os.close(saved)
    finally:
        os.close(fd)
    assert log.read_text() == "OLD\nnew\n" and log.stat().st_ino == inode  # appended, the file never replaced


def test_atomic_write_syncs_the_file_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    """Durable across a power loss, not only a killed process: the data reaches the disk before the
    new name does, and the rename itself is synced (the directory's entry)."""
    import aiayn.io

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)
    monkeypatch.setattr(aiayn.io.os, "fsync", fsync)
    monkeypatch.setattr(aiayn.io.os, "replace", replace)
    target = tmp_path / "out.txt"
    with atomic_write(target) as tmp:
        tmp.write_text("done")
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    assert events[0][1].startswith(str(tmp_path / ".out.txt.")) and events[2][1] == str(tmp_path)
    assert target.read_text() == "done"

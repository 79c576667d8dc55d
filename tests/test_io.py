import pytest

from aiayn.io import atomic_write


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

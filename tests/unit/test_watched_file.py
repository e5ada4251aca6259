"""shared/watched_file.py: a change is seen once, however the file is replaced (rename over,
in-place rewrite, a Kubernetes Secret volume's ``..data`` symlink swap, removal)."""

from __future__ import annotations

import os
from pathlib import Path

from shared.watched_file import WatchedFile


def test_first_check_then_only_changes(tmp_path: Path):
    f = tmp_path / "keys.yaml"
    f.write_text("a")
    w = WatchedFile(f)
    assert w.check() and w.read() == "a"
    assert not w.check() and not w.check()


def test_rename_over_and_in_place_rewrite(tmp_path: Path):
    f = tmp_path / "keys.yaml"
    f.write_text("a")
    w = WatchedFile(f)
    w.check()
    tmp = tmp_path / ".keys.tmp"
    tmp.write_text("b")
    os.replace(tmp, f)  # what editors and `headroom keys` do
    assert w.check() and w.read() == "b"
    assert not w.check()
    st = f.stat()
    f.write_text("cc")  # in place: same inode, new size and mtime
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert w.check() and w.read() == "cc"


def test_kubernetes_secret_symlink_swap(tmp_path: Path):
    """A Secret volume: keys.yaml -> ..data/keys.yaml, ..data -> ..<timestamp>/; an update
    writes a new timestamped directory and renames a new ..data link over the old one."""
    mount = tmp_path / "secret"
    mount.mkdir()
    v1 = mount / "..2025_01_01_00_00_00.1"
    v1.mkdir()
    (v1 / "keys.yaml").write_text("one")
    (mount / "..data").symlink_to(v1.name)
    (mount / "keys.yaml").symlink_to("..data/keys.yaml")
    w = WatchedFile(mount / "keys.yaml")
    assert w.check() and w.read() == "one"
    v2 = mount / "..2025_01_01_00_01_00.2"
    v2.mkdir()
    (v2 / "keys.yaml").write_text("two")  # same size, maybe the same mtime second
    (mount / "..data_tmp").symlink_to(v2.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    for p in sorted(v1.iterdir()):
        p.unlink()
    v1.rmdir()
    assert w.check() and w.read() == "two"
    assert not w.check()


def test_a_vanished_file_is_one_change(tmp_path: Path):
    f = tmp_path / "keys.yaml"
    f.write_text("a")
    w = WatchedFile(f)
    w.check()
    f.unlink()
    assert w.check()  # the reader then fails once
    assert not w.check()
    f.write_text("b")
    assert w.check() and w.read() == "b"

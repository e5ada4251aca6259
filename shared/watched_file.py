"""A file read again when it changes: the gateway's API-key file and pod-credential file.

Change detection compares the file's identity and shape as :func:`os.stat` sees them
through every symlink (device, inode, size, mtime in ns) with the resolved path. That covers
the ways such files get replaced:

- an editor or ``headroom keys`` writing a temporary file and renaming it over the old one
  (new inode),
- an in-place rewrite (new mtime / size),
- a Kubernetes Secret or ConfigMap volume update, which writes the new content into a fresh
  timestamped directory and atomically swaps the ``..data`` symlink the visible file points
  through (new resolved path and inode; the visible path never changes).

Polling rather than inotify: a stat per interval is a few microseconds, works on every
filesystem and in every container, and needs no special handling of symlink swaps (inotify
watches the old inode, which a swap leaves behind).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class FileIdentity:
    real_path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int


def identity(path: str | Path) -> FileIdentity:
    """The file's identity through its symlinks. Raises OSError (e.g. FileNotFoundError)."""
    st = os.stat(path)
    return FileIdentity(os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class WatchedFile:
    """:meth:`check` is True once after each change of the file (its first call: True).

    The identity is taken before the content is read, so a write that lands between the
    two shows as one more change at the next check (a harmless extra read), never as a
    missed one. A file that vanishes is a change too (the reader's read then fails, once)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.seen: FileIdentity | None = None
        self._checked = False

    def check(self) -> bool:
        try:
            now: FileIdentity | None = identity(self.path)
        except OSError:
            now = None
        if self._checked and now == self.seen:
            return False
        self.seen, self._checked = now, True
        return True

    def read(self) -> str:
        """The file's text (UTF-8). Raises OSError or UnicodeDecodeError."""
        return self.path.read_text(encoding="utf-8")

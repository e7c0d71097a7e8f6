"""Where compiled artefacts live: /var/cache/ebpfkit for root, ~/.cache/ebpfkit otherwise,
or $EBPFKIT_CACHE_DIR. Writes are atomic (write to a temp file, then rename) so two
tools starting at once never see half a file.

This is on every tool's start path, so it avoids heavy imports: paths are plain strings
(pathlib and the re module it pulls in cost a start ~9 ms), blake2b comes from the builtin
_blake2 (hashlib would load OpenSSL) and small records are stored with marshal.
"""

from __future__ import annotations

import marshal
import os

try:
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b


CACHE_ENV = "EBPFKIT_CACHE_DIR"


def cache_dir() -> str:
    env = os.environ.get(CACHE_ENV)
    if env:
        base = os.path.abspath(env)
    elif os.geteuid() == 0:
        base = "/var/cache/ebpfkit"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "ebpfkit")
    _make(base)
    return base


def subdir(name: str) -> str:
    path = os.path.join(cache_dir(), name)
    _make(path)
    return path


def _make(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:  # e.g. a user whose home does not exist or is not writable
        from ..errors import EbpfkitError

        raise EbpfkitError(f"cannot create the cache directory {path}: {exc.strerror}",
                           hint=f"set {CACHE_ENV} to a writable directory") from None


def digest(*parts: bytes | str) -> str:
    h = blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    h = blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path: str, data: bytes) -> None:
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_record(path: str):
    """A small record (dicts, lists, str, int) written by write_record, or None."""
    try:
        with open(path, "rb") as f:
            return marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def write_record(path: str, value) -> None:
    atomic_write(path, marshal.dumps(value))


def stat_key(path: str | os.PathLike) -> str:
    """A cheap identity for a file: size and mtime (used before paying for a content hash)."""
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"

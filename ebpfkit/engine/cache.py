"""Where compiled artefacts live: /var/cache/ebpfkit for root, ~/.cache/ebpfkit otherwise,
or $EBPFKIT_CACHE_DIR. Writes are atomic (write to a temp file, then rename) so two
tools starting at once never see half a file.

This is on every tool's start path, so it avoids heavy imports: blake2b comes from the
builtin _blake2 (hashlib would load OpenSSL) and small records are stored with marshal.
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path

try:
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b


def cache_dir() -> Path:
    env = os.environ.get("EBPFKIT_CACHE_DIR")
    if env:
        base = Path(env)
    elif os.geteuid() == 0:
        base = Path("/var/cache/ebpfkit")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ebpfkit"
    base.mkdir(parents=True, exist_ok=True)
    return base


def subdir(name: str) -> Path:
    path = cache_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
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


def read_record(path: Path):
    """A small record (dicts, lists, str, int) written by write_record, or None."""
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def write_record(path: Path, value) -> None:
    atomic_write(path, marshal.dumps(value))


def stat_key(path: str | os.PathLike) -> str:
    """A cheap identity for a file: size and mtime (used before paying for a content hash)."""
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"

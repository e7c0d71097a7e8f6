"""Where compiled artefacts live: /var/cache/ebpfkit for root, ~/.cache/ebpfkit otherwise,
or $EBPFKIT_CACHE_DIR. Writes are atomic (write to a temp file, then rename) so two
tools starting at once never see half a file."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


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
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, value) -> None:
    atomic_write(path, json.dumps(value, sort_keys=True).encode())


def stat_key(path: str | os.PathLike) -> str:
    """A cheap identity for a file: size and mtime (used before paying for a content hash)."""
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"

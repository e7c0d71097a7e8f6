"""Prebuilt CO-RE objects: every program shipped in the ebpfkit package compiled once and loaded where
a machine has no clang (CO-RE relocates them for its kernel). A wheel ships them as package
data; an editable install (scripts/setup.sh) writes them into the source tree's
programs/prebuilt. Either way they are where the engine looks: compiler.PREBUILT_DIR."""

from __future__ import annotations

import os
from collections import namedtuple
from pathlib import Path

from ..errors import NotSupportedError
from . import cache
from .compiler import CLANG_ENV, MIN_CLANG, PACKAGE_DIR, Compiler, Source, prebuilt_object

Built = namedtuple("Built", "path written")  # written: False when the object there was current


def program_sources() -> list[Path]:
    """Every *.bpf.c in the package (each tool keeps its own next to its code), by name."""
    return sorted(Path(PACKAGE_DIR).rglob("*.bpf.c"), key=lambda p: p.name)


def missing(directory: str | Path | None = None) -> list[str]:
    """The shipped programs without an object in ``directory`` (default: where the engine looks)."""
    return [src.name for src in program_sources() if not os.path.exists(prebuilt_object(src.name, directory))]


def build_all(out_dir: str | Path | None = None, progress=None) -> list[Built]:
    """Compile every program into ``out_dir``/<name>.bpf.o (default: where the engine looks);
    ``progress(name)`` is called per program. Compiles come from the object cache when nothing
    changed, and an object whose bytes are already there is left alone: a second run costs little."""
    compiler = Compiler(use_pch=False)
    if compiler.clang is None:  # the engine would hand back the prebuilt objects themselves
        raise NotSupportedError("clang", f"building CO-RE objects needs clang >= {MIN_CLANG}; none found",
                                hint=f"apt-get install clang (or set {CLANG_ENV})")
    built = []
    for src in program_sources():
        if progress:
            progress(src.name)
        obj = compiler.compile(Source.from_path(src))
        target = Path(prebuilt_object(src.name, out_dir))
        target.parent.mkdir(parents=True, exist_ok=True)
        built.append(Built(target, _install(obj, target)))
    return built


def _install(obj: str, target: Path) -> bool:
    """Put ``obj`` at ``target`` (atomically: an engine may be loading it); False if it was there."""
    with open(obj, "rb") as f:
        data = f.read()
    try:
        if target.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    cache.atomic_write(str(target), data)
    return True

"""Prebuilt CO-RE objects: every program in ebpfkit/programs compiled once, shipped in the
wheel, and loaded when a machine has no clang (CO-RE relocates them for its kernel)."""

from __future__ import annotations

import shutil
from pathlib import Path

from .compiler import PREBUILT_DIR, PROGRAMS_DIR, Compiler, Source


def program_sources() -> list[Path]:
    return sorted(Path(PROGRAMS_DIR).glob("*.bpf.c"))


def build_all(out_dir: str | Path = PREBUILT_DIR, progress=None) -> list[Path]:
    """Compile every program into ``out_dir``/<name>.bpf.o; ``progress(name)`` is called per program."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    compiler = Compiler(use_pch=False)
    built = []
    for src in program_sources():
        if progress:
            progress(src.name)
        obj = compiler.compile(Source.from_path(src))
        target = out_dir / (src.name.removesuffix(".c") + ".o")
        shutil.copyfile(obj, target)
        built.append(target)
    return built

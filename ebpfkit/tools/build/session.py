"""build's session: compile every program shipped with ebpfkit into prebuilt CO-RE objects
(which load on any BTF kernel without clang), and say what was built. No click, no printing::

    from ebpfkit.tools import build
    result = build.build(out_dir="/tmp/objs")
    [(o.path.name, o.bytes, o.written) for o in result.objects]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from ..config import ToolConfig


@dataclass(frozen=True)
class Config(ToolConfig):
    out_dir: str | None = None  # where to write the objects (default: where the engine looks)

    def validate(self) -> None:
        # made here: whether a path can be a directory is only known by making it, and a
        # path that cannot be one is the caller's mistake, found before anything compiles
        if self.out_dir is not None:
            _make_dir(self.out_dir)

    @property
    def target(self) -> Path:
        from ...engine.compiler import PREBUILT_DIR

        return Path(self.out_dir or PREBUILT_DIR)


@dataclass(frozen=True)
class BuiltObject:
    path: Path
    bytes: int
    written: bool  # False when the object there was already current


@dataclass(frozen=True)
class BuildResult:
    out_dir: Path
    objects: list[BuiltObject]

    @property
    def written(self) -> int:
        return sum(o.written for o in self.objects)


def build(config: Config | str | os.PathLike | None = None, progress=None, **settings) -> BuildResult:
    """Compile every shipped program into ``config.out_dir`` (or a Config built from keyword
    arguments, or the directory itself); ``progress(name)`` is called per program."""
    from ...engine.prebuilt import build_all

    if isinstance(config, (str, os.PathLike)):
        config = Config(out_dir=os.fspath(config))
    config = Config.given(config, **settings)
    target = config.target
    _make_dir(str(target))
    built = build_all(target, progress=progress)
    return BuildResult(target, [BuiltObject(b.path, b.path.stat().st_size, b.written) for b in built])


def _make_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError("out_dir", f"cannot create directory {path}: {exc.strerror}") from None

"""ebpfkit: compile C BPF programs at run time against the kernel's BTF and load them with libbpf.

Importing ebpfkit is cheap; the engine (and libbpf) load on first use::

    import ebpfkit
    with ebpfkit.compile(text=C).load() as obj:
        obj.attach()
        obj.maps["counts"].to_dataframe()
"""

from ._version import __version__
from .errors import (AttachError, CompileError, EbpfkitError, LoadError, MapError, NotSupportedError,
                     PermissionDeniedError, VerifierError)

__all__ = ["__version__", "compile", "load", "open_object", "features", "EbpfkitError", "CompileError",
           "VerifierError", "LoadError", "NotSupportedError", "PermissionDeniedError", "AttachError",
           "MapError"]


def __getattr__(name):
    if name in ("compile", "load", "open_object"):
        from . import engine

        return getattr(engine, name)
    if name == "features":
        from .engine import features

        return features
    raise AttributeError(f"module 'ebpfkit' has no attribute {name!r}")

"""What every tool's Session shares: it is a context manager that ``close()``s (detaches and
unloads) at the end of a ``with``. Each tool's ``open(config)`` returns one."""

from __future__ import annotations


class ToolSession:
    """Base of a tool's ``Session``; the tool defines ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]):
    """A tool package's ``__getattr__``, ``__dir__`` and ``__all__`` for ``exports``
    ({submodule: names}): each name is imported from its submodule on first use, so the
    tool's command (``--help`` included) does not load the engine its sessions need."""
    import importlib

    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)

    def __dir__():
        import sys

        return sorted(set(vars(sys.modules[package])) | set(module_of))

    return __getattr__, __dir__, sorted(module_of)

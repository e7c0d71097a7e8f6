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


def choose_typed_or_raw(spec, typed: str, raw: str) -> str:
    """For a program that defines each hook twice, as ``tp_btf/`` and ``raw_tp/`` sections:
    load the tp_btf ones where the kernel has BTF of its own (arguments typed, no copies),
    else the raw tracepoints, which need only CO-RE (a --btf file serves them). Returns the
    label of the chosen set, ``typed`` or ``raw``."""
    from ..engine import features

    has_kernel_btf = features.probe("kernel_btf").supported
    for prog in spec.programs.values():
        prog.autoload = prog.section.startswith("tp_btf/") == has_kernel_btf
    return typed if has_kernel_btf else raw

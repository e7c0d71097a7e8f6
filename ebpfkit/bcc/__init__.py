"""BCC compatibility (issue #23): ``ebpfkit.bcc.BPF`` runs BCC programs and scripts on
ebpfkit's engine, against the kernel's BTF (no kernel headers): the C is translated to
CO-RE C (translate.py), tables are BCC's classes over the engine's maps (table.py).
``probe`` says whether BCC itself is installed, to compare against."""

from __future__ import annotations


def __getattr__(name):  # BPF on first use: importing ebpfkit.bcc.probe stays cheap
    if name == "BPF":
        from .bpf import BPF

        return BPF
    raise AttributeError(name)

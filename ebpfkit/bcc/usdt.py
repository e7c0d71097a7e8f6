"""BCC's USDT class over libbpf's USDT support: ``USDT(pid=|path=)``, ``enable_probe(probe,
fn_name)``, then ``BPF(text=..., usdt_contexts=[usdt])`` attaches each function at every
place its probe is written (engine links.usdt). The program reads the probe's arguments with
BCC's ``bpf_usdt_readarg(n, ctx, &v)`` / ``bpf_usdt_readarg_p(n, ctx, buf, len)`` (ek_bcc.h:
libbpf's ``bpf_usdt_arg``, which decodes each argument's spec for this place)."""

from __future__ import annotations

import sys
from collections import OrderedDict

from ..engine import usdt as notes
from ..errors import EbpfkitError
from .facts import _binary, _text


class USDTException(EbpfkitError):
    """BCC's name for a USDT probe that cannot be found or read (scripts catch it)."""


class USDT:
    """The USDT probes of one process (``pid``) or one binary or library (``path``)."""

    def __init__(self, pid=None, path=None):
        self.pid = int(pid) if pid else None
        self.path = _binary(_text(path)) if path else None
        if self.pid is None and self.path is None:
            raise USDTException("USDT: give a process (pid=) or a binary or library (path=)")
        self.enabled: list[tuple[str | None, str, str]] = []  # (provider or None, name, function)

    def _where(self) -> str:
        return f"process {self.pid}" if self.path is None else self.path

    def _probes(self, provider: str | None, name: str) -> list[notes.UsdtProbe]:
        try:
            return notes.find(name, provider, path=self.path, pid=self.pid)
        except OSError as exc:
            raise USDTException(f"USDT: cannot read the mappings of process {self.pid}: {exc.strerror}") from None

    def enable_probe(self, probe, fn_name) -> None:
        """Run BPF function ``fn_name`` at USDT probe ``probe`` ("name" or "provider:name")."""
        provider, _, name = _text(probe).rpartition(":")
        if not self._probes(provider or None, name):
            raise USDTException(f"USDT probe '{_text(probe)}' is not in {self._where()}")
        self.enabled.append((provider or None, name, _text(fn_name)))

    def enable_probe_or_bail(self, probe, fn_name) -> None:
        """enable_probe, or (as BCC does) a message and exit status 1."""
        try:
            self.enable_probe(probe, fn_name)
        except USDTException as exc:
            from ..output import forward_output

            forward_output("stderr", f"Error attaching USDT probes: {exc}\n".encode())
            sys.exit(1)

    def get_text(self) -> str:
        return ""  # BCC generates C for each argument here; libbpf's bpf_usdt_arg() decodes them instead

    def get_context(self):
        return self

    def get_probe_arg_ctype(self, probe_name, arg_index) -> str:
        """The C type of argument ``arg_index`` (from 0) of probe ``probe_name``, from its spec."""
        provider, _, name = _text(probe_name).rpartition(":")
        found = self._probes(provider or None, name)
        if not found or arg_index >= len(found[0].arg_sizes):
            raise USDTException(f"USDT probe '{_text(probe_name)}' has no argument {arg_index + 1}")
        size = found[0].arg_sizes[arg_index]
        return f"{'' if size < 0 else 'u'}int{abs(size) * 8}_t"

    def enumerate_probes(self) -> list[ProbeInfo]:
        """One entry per probe (provider and name), with its places, as tplist lists them."""
        places = [self.path] if self.path else notes.binaries_of(self.pid)
        grouped: OrderedDict = OrderedDict()
        for place in places:
            for p in notes.probes_in(place):
                grouped.setdefault((p.path, p.provider, p.name), []).append(p)
        return [ProbeInfo(found) for found in grouped.values()]

    def enumerate_active_probes(self) -> list[tuple]:
        """(binary, function, address, pid) for each place of each enabled probe: where BCC's
        scripts attach plain uprobes themselves (ustat), which BPF.attach_uprobe then does
        with the probe's semaphore raised."""
        return [(p.path.encode(), fn.encode(), p.pc, self.pid or -1)
                for provider, name, fn in self.enabled for p in self._probes(provider, name)]

    def attach_in(self, bpf) -> None:
        """Attach each enabled function of ``bpf`` (called by BPF once its maps exist)."""
        for provider, name, fn in self.enabled:
            prog = bpf.load_func(fn, bpf.KPROBE)
            targets = {(p.path, p.provider) for p in self._probes(provider, name)}
            for path, prov in sorted(targets):
                bpf._links[("usdt", f"{path}:{prov}:{name}", fn)] = prog.attach_usdt(path, prov, name,
                                                                                     self.pid or -1)


class ProbeInfo:
    """A probe as BCC's USDT.enumerate_probes() gives it."""

    def __init__(self, places: list[notes.UsdtProbe]):
        self.places = places
        first = places[0]
        self.provider, self.name, self.bin_path = first.provider.encode(), first.name.encode(), first.path.encode()
        self.num_locations = len(places)
        self.num_arguments = len(first.arg_sizes)

    def short_name(self) -> str:
        return f"{self.provider.decode()}:{self.name.decode()}"

    def get_location(self, index: int) -> Location:
        return Location(self.places[index])

    def __str__(self) -> str:
        return f"{self.bin_path.decode()} {self.short_name()}"


class Location:
    def __init__(self, probe: notes.UsdtProbe):
        self.probe = probe
        self.address = probe.pc
        self.num_arguments = len(probe.arg_sizes)

    def get_argument(self, index: int) -> str:
        spec = self.probe.args.split()[index]
        size, _, where = spec.partition("@")
        return f"{abs(int(size))} {'signed' if int(size) < 0 else 'unsigned'} bytes @ {where}"

    def __str__(self) -> str:
        semaphore = f", semaphore {self.probe.semaphore:#x}" if self.probe.semaphore else ""
        return f"{self.probe.pc:#x}{semaphore}"

"""Loading, attaching, pinning and removing sockmap acceleration for one cgroup.

``Accelerator`` is the foreground form (``run``, tests, notebooks): close() detaches.
``enable()`` pins it under /sys/fs/bpf/ebpfkit/sockmap/<cgroup id>/ so it outlives the
command; ``Enablement`` reads such a pin directory back; ``disable()`` removes one.

Detaching never cuts a connection: the programs are attached to the cgroup and to the map,
and each socket already in the map keeps its own reference to the sk_msg (and sk_skb)
program until it closes. So after disable new connections take the normal path while
accelerated ones go on being redirected; nothing queued is dropped. Removing sockets from
the map instead would free their psock and any data still waiting in its ingress queue.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from ...engine import features, pinned
from ...engine.constants import AttachType
from ...engine.maps import KernelMap
from ...engine.pinset import COMPLETE, STALE, PinSet
from ...errors import AttachError, ConfigError
from ...sysinfo.cgroups import cgroup_path
from ..config import ToolConfig
from . import maps as M
from .cgroups import require_privileges, resolve_cgroup
from .regression import RegressionCheck, detect

TOOL = "sockmap"
PIN_BASE = PinSet(TOOL).path
# (program, map or None for the cgroup) -> the pin of the link attaching it there, in the
# order of attaching: map programs first (a socket copies its map's programs when it is
# added), the cgroup's sockops, which adds sockets, last
LINK_PINS = {("sockmap_pass", "sock_hash"): "link_sk_skb", ("sockmap_pass", "sock_hash6"): "link_sk_skb6",
             ("sockmap_redirect", "sock_hash"): "link_sk_msg", ("sockmap_redirect", "sock_hash6"): "link_sk_msg6",
             ("sockmap_sockops", None): "link_sockops"}
PROG_PINS = {"sockmap_redirect": "prog_sk_msg", "sockmap_pass": "prog_sk_skb"}
PROG_ATTACH = {"sockmap_redirect": AttachType.SK_MSG_VERDICT, "sockmap_pass": AttachType.SK_SKB_VERDICT}
SKB_VERDICT_CHOICES = ("auto", "on", "off")
MAX_SOCKETS = 1 << 20  # the SOCKHASH's size, at most


@dataclass
class Options(ToolConfig):
    """What `enable`/`run` accelerate; checked the same from the CLI, YAML or a notebook
    (ConfigError, exit 2)."""

    ports: tuple[int, ...] = ()
    ipv6: bool = True
    skb_verdict: str = "auto"  # the regression workaround: auto (when detected), on, off
    max_sockets: int = 65535

    def validate(self) -> None:
        try:
            self.ports = tuple(sorted({int(p) for p in self.ports}))
        except (TypeError, ValueError):
            raise ConfigError("ports", f"expected a list of TCP ports, got {self.ports!r}") from None
        bad = [p for p in self.ports if not 0 < p < 65536]
        if bad:
            raise ConfigError("ports", f"not a TCP port: {bad[0]}")
        if self.skb_verdict not in SKB_VERDICT_CHOICES:
            raise ConfigError("skb_verdict", f"{self.skb_verdict!r} is not one of {', '.join(SKB_VERDICT_CHOICES)}")
        if not 2 <= self.max_sockets <= MAX_SOCKETS:
            raise ConfigError("max_sockets", f"must be in 2..{MAX_SOCKETS}, got {self.max_sockets}")


@dataclass
class Accelerator:
    """sockops + sk_msg (+ the pass-through sk_skb verdict) attached to one cgroup."""

    cgroup: str | None = None
    options: Options = field(default_factory=Options)
    regression: RegressionCheck | None = None

    def __post_init__(self):
        require_privileges()
        self.cgroup, self.cgroup_id = resolve_cgroup(self.cgroup)
        self.obj = None
        self.links: dict = {}  # link pin name -> Link

    @property
    def skb_verdict(self) -> bool:
        if self.options.skb_verdict == "auto":
            if self.regression is None:
                self.regression = detect()
            return self.regression.affected
        return self.options.skb_verdict == "on"

    def start(self) -> "Accelerator":
        from ...engine import compile as compile_bpf

        spec = compile_bpf(os.path.join(os.path.dirname(__file__), "sockmap.bpf.c"))
        spec.rodata.update({"targ_ipv6": self.options.ipv6, "targ_filter_ports": bool(self.options.ports)})
        for name in M.SOCK_MAPS:
            spec.maps[name].max_entries = self.options.max_sockets
        verdict = self.skb_verdict
        if verdict:
            features.require("sk_skb_verdict")  # exit 3 before 5.13, not the attach's EINVAL
        spec.programs["sockmap_pass"].autoload = verdict
        self.obj = spec.load()
        try:
            M.write_ports(self.map("ports"), self.options.ports)
            M.write_info(self.map("info"), enabled_at=time.time(), ipv6=self.options.ipv6, skb_verdict=verdict,
                         regression=bool(self.regression and self.regression.affected),
                         nports=len(self.options.ports), cgroup_id=self.cgroup_id)
            for (prog, map_name), pin in LINK_PINS.items():
                if map_name is None:
                    self.links[pin] = self.obj.programs[prog].attach_cgroup(self.cgroup)
                elif self.obj.programs[prog].autoload:
                    self.links[pin] = self.obj.programs[prog].attach_sockmap(self.obj.maps[map_name],
                                                                             PROG_ATTACH[prog])
        except BaseException:
            self.close()
            raise
        return self

    def map(self, name: str):
        return self.obj.maps[name]

    @property
    def btf(self):
        """The object's BTF: the layouts of its maps' keys and values."""
        return self.obj.btf

    def stats(self) -> dict[str, int]:
        return M.read_stats(self.map("stats"))

    def sockets(self) -> list[dict]:
        return M.read_sockets(self.btf, *map(self.map, M.SOCK_MAPS))

    def keys(self) -> set[bytes]:
        return M.raw_keys(*map(self.map, M.SOCK_MAPS))

    def status(self) -> dict:
        return _status_record(self.cgroup, self.cgroup_id, M.read_info(self.map("info")),
                              M.read_ports(self.map("ports")), self.stats(),
                              M.count_sockets(*map(self.map, M.SOCK_MAPS)), pinned=False)

    def pin(self, pins: PinSet) -> None:
        """Pin maps, links and programs so the acceleration outlives this process."""
        pins.pin_maps(self.obj)
        for pin, link in self.links.items():
            if link.is_bpf_link:
                pins.pin_link(pin, link)
            else:  # BPF_PROG_ATTACH on a map (kernels < 6.10): the map holds the program
                self.obj.links.remove(link)  # so closing the object does not detach it
        for name, pin in PROG_PINS.items():
            prog = self.obj.programs[name]
            if prog.autoload:
                try:
                    pins.pin(pin, prog.fd)
                except pinned.PinError as exc:
                    raise AttachError(f"cannot pin program {name} in {pins.path}: "
                                      f"{os.strerror(exc.errno)}") from None
        pins.seal(cgroup=self.cgroup, cgroup_id=self.cgroup_id)

    def close(self) -> None:
        if self.obj is not None:
            self.obj.close()
            self.obj = None
            self.links = {}

    def __enter__(self):
        return self.start() if self.obj is None else self

    def __exit__(self, *exc):
        self.close()


# --- pinned enablements ------------------------------------------------------------------

def pin_set(cgroup_id: int) -> PinSet:
    return PinSet(f"{TOOL}/{cgroup_id}")


def pin_directory(cgroup_id: int) -> str:
    return pin_set(cgroup_id).path


@dataclass
class Enablement:
    """What `enable` left pinned for one cgroup."""

    cgroup_id: int

    @property
    def pins(self) -> PinSet:
        return pin_set(self.cgroup_id)

    @property
    def directory(self) -> str:
        return self.pins.path

    @property
    def cgroup(self) -> str | None:
        return cgroup_path(self.cgroup_id)

    @property
    def complete(self) -> bool:
        """Everything enable pinned is there (stale too: its cgroup removed, which status
        shows as such)."""
        return self.pins.state() in (COMPLETE, STALE)

    @property
    def btf(self):
        """The BTF of the object whose maps are pinned here (sockmap.h's layouts)."""
        with self._map("info") as info:
            return info.btf

    def _map(self, name: str) -> KernelMap:
        try:
            return KernelMap.owning(self.pins.open_map(name))
        except pinned.PinError as exc:
            raise AttachError(f"sockmap pin {self.directory}/{name} is missing: "
                              f"{os.strerror(exc.errno)}") from None

    def stats(self) -> dict[str, int]:
        with self._map("stats") as m:
            return M.read_stats(m)

    @contextlib.contextmanager
    def _sock_maps(self):
        with self._map(M.SOCK_MAPS[0]) as v4, self._map(M.SOCK_MAPS[1]) as v6:
            yield v4, v6

    def sockets(self) -> list[dict]:
        with self._sock_maps() as maps:
            return M.read_sockets(self.btf, *maps)

    def keys(self) -> set[bytes]:
        with self._sock_maps() as maps:
            return M.raw_keys(*maps)

    def status(self) -> dict:
        with self._map("info") as info, self._map("ports") as ports, self._sock_maps() as maps:
            return _status_record(self.cgroup, self.cgroup_id, M.read_info(info), M.read_ports(ports),
                                  self.stats(), M.count_sockets(*maps), pinned=True)

    def remove(self) -> None:
        """Detach from the cgroup and the map, unpin everything (connections keep working)."""
        pins = self.pins
        pins.detach_links()  # sockops first (pinned last): no socket added meanwhile
        _prog_detach_fallback(pins.path)
        pins.remove()


def _prog_detach_fallback(directory: str) -> None:
    """Kernels without sockmap links: detach the pinned programs from the pinned maps."""
    if os.path.exists(os.path.join(directory, "link_sk_msg")):
        return
    progs = {}
    try:
        for prog, pin in PROG_PINS.items():
            with contextlib.suppress(pinned.PinError):
                progs[prog] = pinned.open_pin(os.path.join(directory, pin))
        for map_name in M.SOCK_MAPS:
            try:
                map_fd = pinned.open_pin(os.path.join(directory, map_name))
            except pinned.PinError:
                continue
            for prog, fd in progs.items():
                with contextlib.suppress(pinned.PinError):
                    pinned.prog_detach(fd, map_fd, PROG_ATTACH[prog])
            os.close(map_fd)
    finally:
        for fd in progs.values():
            os.close(fd)


def enablements() -> list[Enablement]:
    return [Enablement(int(name)) for name in (os.path.basename(p.path) for p in PinSet.under(TOOL))
            if name.isdigit()]


def find(cgroup: str | None) -> Enablement | None:
    _, cgroup_id = resolve_cgroup(cgroup)
    return Enablement(cgroup_id) if pin_set(cgroup_id).exists() else None


class AlreadyEnabled(Exception):
    def __init__(self, enablement: Enablement):
        super().__init__(f"sockmap acceleration is already enabled on {enablement.cgroup}")
        self.enablement = enablement


def enable(cgroup: str | None = None, options: Options | None = None) -> Enablement:
    """Attach and pin; returns the Enablement. Raises AlreadyEnabled if it is there already."""
    acc = Accelerator(cgroup, options or Options())
    existing = find(acc.cgroup)
    if existing is not None:
        if existing.complete:
            raise AlreadyEnabled(existing)
        existing.remove()  # a half-made pin directory (an enable that crashed)
    pins = pin_set(acc.cgroup_id).create(TOOL)
    try:
        acc.start()
        acc.pin(pins)
    except BaseException:
        acc.close()
        Enablement(acc.cgroup_id).remove()
        raise
    acc.close()  # the pins keep everything alive
    return Enablement(acc.cgroup_id)


def disable(cgroup: str | None = None) -> Enablement | None:
    """Remove the acceleration pinned for ``cgroup``; None if there was none."""
    require_privileges()
    found = find(cgroup)
    if found is not None:
        found.remove()
    return found


def fionread_counts_redirected() -> bool:
    """Whether FIONREAD counts bytes redirected into a socket's psock queue: only kernels
    with tcp_bpf_ioctl do; on older ones (e.g. 6.1) it reports 0 for them."""
    from ...engine.features import has_kernel_function

    return has_kernel_function("tcp_bpf_ioctl")


def _status_record(cgroup, cgroup_id, info, ports, stats, sockets, pinned) -> dict:
    return {"cgroup": cgroup or f"(removed cgroup id {cgroup_id})", "cgroup_id": cgroup_id,
            "pinned": pinned, "ports": ports, "ipv6": bool(info.get("ipv6")),
            "skb_verdict": bool(info.get("skb_verdict")), "regression": bool(info.get("regression")),
            "fionread_counts_redirected": fionread_counts_redirected(),
            "enabled_at": info.get("enabled_at", 0), "sockets": sockets, **stats}

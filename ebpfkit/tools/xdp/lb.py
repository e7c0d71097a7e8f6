"""The XDP load balancer: one VIP (address, port, protocol) spread over backends by a Maglev
table, forwarded at L2 for direct server return (see xdp_lb.bpf.c).

    att = attach("veth0", LbConfig(vip="10.0.0.100:80/tcp", backends=["10.0.0.11"]))
    with open_pinned("veth0") as lb:            # another process, later
        lb.change(add=[resolve(lb_iface, parse_backend("10.0.0.12"))])

Backend MACs come from the neighbour table of the load balancer's namespace (resolved on
demand); a backend must be on a directly connected network, out of the XDP interface
(XDP_TX) or another one (XDP_REDIRECT through the devmap).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import time
from dataclasses import dataclass

from ...errors import ConfigError, EbpfkitError
from ..config import ToolConfig, check_choice
from . import maglev, pins
from .counters import ZERO, counter, slot_names
from .rules import parse_proto, proto_name
from .modes import MODES, mode_enumerator, mode_name
from .tables import Tables

PROGRAM = os.path.join(os.path.dirname(__file__), "xdp_lb.bpf.c")
DEFAULT_MAX_BACKENDS = 256
MAX_BACKENDS = 65536
DEFAULT_FLOWS = 65536
MAP_NAMES = ("backends", "table_a", "table_b", "lb_active", "barrier", "flows", "tx_ports",
             "backend_stats", "lb_totals", "lb_conf")


class LbError(EbpfkitError):
    """A VIP or backend that cannot be used as given: a usage error."""

    exit_code = 2


# --- what the user gives -------------------------------------------------------------------------

@dataclass(frozen=True)
class Vip:
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    proto: int = 6

    def __str__(self) -> str:
        host = f"[{self.addr}]" if self.addr.version == 6 else str(self.addr)
        return f"{host}:{self.port}/{proto_name(self.proto)}"


def parse_vip(text: str) -> Vip:
    """``IP:PORT[/proto]``; IPv6 as ``[2001:db8::1]:80/udp``. The protocol defaults to tcp."""
    m = re.fullmatch(r"\s*(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]+)):(\d+)(?:/([A-Za-z0-9]+))?\s*", text or "")
    if not m:
        raise LbError(f"bad VIP '{text}': expected IP:PORT[/tcp|udp], e.g. 10.0.0.100:80/tcp "
                      "or [2001:db8::100]:443")
    try:
        addr = ipaddress.ip_address(m.group(1) or m.group(2))
    except ValueError as exc:
        raise LbError(f"bad VIP '{text}': {exc}") from None
    port = int(m.group(3))
    if not 1 <= port <= 65535:
        raise LbError(f"bad VIP '{text}': port {port} is not 1-65535")
    try:
        proto = parse_proto(m.group(4) or "tcp")
    except EbpfkitError as exc:
        raise LbError(f"bad VIP '{text}': {exc}") from None
    if proto not in (6, 17, 132):
        raise LbError(f"bad VIP '{text}': the protocol must be tcp, udp or sctp")
    return Vip(addr, port, proto)


@dataclass(frozen=True)
class BackendSpec:
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    weight: int = 1
    mac: str | None = None

    @property
    def name(self) -> str:
        return str(self.addr)


_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


def parse_backend(text: str) -> BackendSpec:
    """``IP[,weight=N][,mac=MAC]``."""
    head, *opts = [p.strip() for p in str(text).split(",")]
    try:
        addr = ipaddress.ip_address(head)
    except ValueError:
        raise LbError(f"bad backend '{text}': '{head}' is not an IP address "
                      "(IP[,weight=N][,mac=MAC])") from None
    weight, mac = 1, None
    for opt in opts:
        k, _, v = opt.partition("=")
        if k == "weight" and v.isdigit() and 1 <= int(v) <= 65535:
            weight = int(v)
        elif k == "mac" and _MAC.match(v):
            mac = v.lower()
        else:
            raise LbError(f"bad backend '{text}': '{opt}' (options: weight=1-65535, mac=aa:bb:..)")
    return BackendSpec(addr, weight, mac)


@dataclass(frozen=True)
class LbConfig(ToolConfig):
    """What `lb attach` / `lb run` take: one VIP, its backends, the table sizes, the attach
    mode; checked the same from the CLI, YAML or a notebook (ConfigError naming the setting,
    exit 2). Addresses stay as given (text); ``parsed_vip()`` and ``backend_specs()`` parse them."""

    vip: str                         # IP:PORT[/tcp|udp|sctp]
    backends: tuple[str, ...] = ()   # IP[,weight=N][,mac=MAC] each
    table_size: int = maglev.DEFAULT_SIZE
    max_backends: int = DEFAULT_MAX_BACKENDS
    mode: str = "auto"

    def validate(self) -> None:
        if isinstance(self.backends, str) or not isinstance(self.backends, (list, tuple)):
            raise ConfigError("backends", "expected a list of IP[,weight=N][,mac=MAC], got "
                                          f"{type(self.backends).__name__} {self.backends!r}")
        object.__setattr__(self, "backends", tuple(self.backends))  # a YAML list, made immutable
        vip = _parsed("vip", parse_vip, self.vip)
        names = [_parsed("backends", parse_backend, b).name for b in self.backends]
        if not names:
            raise ConfigError("backends", f"VIP {vip} has no backends: give at least one")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError("backends", f"backend {', '.join(twice)} is given twice")
        check_sizes(self.table_size, self.max_backends)
        check_choice("mode", self.mode, MODES)

    def parsed_vip(self) -> Vip:
        return parse_vip(self.vip)

    def backend_specs(self) -> list[BackendSpec]:
        return [parse_backend(b) for b in self.backends]


def _parsed(field: str, parse, text):
    """``parse(text)``, its LbError a ConfigError naming the setting."""
    try:
        return parse(text)
    except LbError as exc:
        raise ConfigError(field, str(exc)) from None


def check_sizes(table_size: int, max_backends: int) -> None:
    """A Maglev table of prime size, with room for at most that many backends."""
    if not maglev.is_prime(table_size):
        raise ConfigError("table_size", f"{table_size} is not prime (65537 and 655373 are)")
    if not 1 <= max_backends <= MAX_BACKENDS:
        raise ConfigError("max_backends", f"must be in 1..{MAX_BACKENDS}, got {max_backends}")
    if max_backends > table_size:
        raise ConfigError("max_backends", f"must not exceed the table size {table_size}, got {max_backends}")


def flow_hash(src: str, dst: str, sport: int, dport: int, proto: int = 6) -> int:
    """The program's flow hash of a 5-tuple: lb_flow_hash() of xdp_lb.h (murmur3 mixing of
    the struct lb_flow_key words), checked against it run in the kernel by a test."""
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    key = (s.packed.ljust(16, b"\0") + d.packed.ljust(16, b"\0")
           + struct.pack("<HHBBH", sport, dport, proto, s.version, 0))
    h = 0x9747B28C
    for (k,) in struct.iter_unpack("<I", key):
        k = (k * 0xCC9E2D51) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * 0x1B873593) & 0xFFFFFFFF
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 40
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


# --- resolving backends --------------------------------------------------------------------------

@dataclass(frozen=True)
class Backend:
    """A backend as the program sees it."""

    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    weight: int
    dmac: str
    smac: str
    ifindex: int
    slot: int = -1
    gen: int = 0
    active: bool = True

    @property
    def name(self) -> str:
        return str(self.addr)

    def value(self) -> dict:
        """Its struct lb_backend (xdp_lb.h), as the map's BTF encodes it."""
        return {"addr": self.addr.packed, "dmac": _mac_bytes(self.dmac), "smac": _mac_bytes(self.smac),
                "ifindex": self.ifindex, "weight": self.weight, "gen": self.gen,
                "family": self.addr.version, "active": int(self.active)}

    @classmethod
    def of_value(cls, slot: int, v) -> "Backend":
        """The backend in slot ``slot`` from its decoded struct lb_backend."""
        ip = _address(v.addr, v.family) if v.family in (4, 6) else None
        return cls(ip, v.weight, bytes(v.dmac).hex(":"), bytes(v.smac).hex(":"), v.ifindex, slot, v.gen,
                   bool(v.active))


def _address(addr, family: int):
    """An address from a __u8[16] field holding IPv4 in its first 4 bytes."""
    return ipaddress.ip_address(bytes(addr[:4] if family == 4 else addr))


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


_NUD_BAD = 0x01 | 0x20  # INCOMPLETE, FAILED


def resolve(iface: pins.Iface, spec: BackendSpec, timeout: float = 3.0) -> Backend:
    """Where to send the backend's frames: egress interface, its MAC, the backend's MAC."""
    with pins.iproute(iface.netns) as ipr:
        try:
            route = ipr.route("get", dst=spec.name)[0]
        except Exception as exc:
            raise LbError(f"backend {spec.name} is not reachable from {iface.where}: {exc}") from None
        if route.get("type") == 2:  # RTN_LOCAL
            raise LbError(f"backend {spec.name} is an address of the load balancer itself")
        gateway = route.get_attr("RTA_GATEWAY")
        if gateway:
            raise LbError(f"backend {spec.name} is routed via {gateway}: direct server return "
                          "needs backends on a directly connected network")
        oif = route.get_attr("RTA_OIF")
        smac = ipr.get_links(oif)[0].get_attr("IFLA_ADDRESS")
        dmac = spec.mac or _neighbour(ipr, iface, spec, oif, timeout)
    return Backend(spec.addr, spec.weight, dmac, smac, oif)


def _neighbour(ipr, iface: pins.Iface, spec: BackendSpec, oif: int, timeout: float) -> str:
    family = socket.AF_INET if spec.addr.version == 4 else socket.AF_INET6
    deadline = time.monotonic() + timeout
    poked = False
    while True:
        for n in ipr.get_neighbours(family=family, ifindex=oif):
            if n.get_attr("NDA_DST") == spec.name and n.get_attr("NDA_LLADDR") \
                    and not n["state"] & _NUD_BAD:
                return n.get_attr("NDA_LLADDR")
        if time.monotonic() > deadline:
            raise LbError(f"no MAC address for backend {spec.name} on {iface.where}: it does not "
                          "answer ARP/neighbour solicitation (give it as IP,mac=MAC)")
        if not poked:  # a datagram to the discard port makes the kernel resolve it
            _poke(iface.netns, family, spec.name)
            poked = True
        time.sleep(0.05)


def _poke(netns: str | None, family: int, addr: str) -> None:
    def send():
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.sendto(b"", (addr, 9))
            except OSError:
                pass

    if netns:
        from ...net import in_netns

        in_netns(netns, send)
    else:
        send()


# --- the maps ------------------------------------------------------------------------------------

class LbTables(Tables):
    """The maps of one load balancer (its own fds)."""

    MAP_NAMES = MAP_NAMES
    KIND = "XDP load balancer"
    COMMAND = "lb"
    PROGRAM = "xdp_lb"

    def __init__(self, maps: dict, path: str | None = None, netns: str | None = None):
        super().__init__(maps, path)
        self.netns = netns  # where backend ifindexes are valid (None: the caller's namespace)

    @classmethod
    def context(cls, netns: str | None) -> dict:
        return {"netns": netns}

    def _set_tx_port(self, slot: int, ifindex: int) -> None:
        """A devmap entry names a device by ifindex, which the kernel resolves in the namespace
        of the thread writing it: write it from the interface's namespace."""
        update = lambda: self.maps["tx_ports"].update(slot, ifindex)  # noqa: E731
        if self.netns:
            from ...net import in_netns

            in_netns(self.netns, update)
        else:
            update()

    # --- configuration ---

    def write_config(self, vip: Vip, mode: str) -> None:
        self.maps["lb_conf"][0] = {"vip": vip.addr.packed, "port": vip.port, "proto": vip.proto,
                                   "family": vip.addr.version, "table_size": self.table_size,
                                   "max_backends": self.max_backends, "xdp_mode": mode_enumerator(mode)}

    def config(self) -> dict:
        conf = self.maps["lb_conf"][0]
        vip = Vip(_address(conf.vip, conf.family), conf.port, conf.proto)
        return {"vip": str(vip), "table_size": conf.table_size, "max_backends": conf.max_backends,
                "mode": mode_name(conf.xdp_mode)}

    @property
    def table_size(self) -> int:
        return self.maps["table_a"].max_entries

    @property
    def max_backends(self) -> int:
        return self.maps["backends"].max_entries

    # --- backends ---

    def slots(self) -> dict[int, Backend]:
        """Every slot ever used (active or not), by slot."""
        out = {}
        for k, v in self.maps["backends"].items():
            b = Backend.of_value(k, v)
            if b.gen:
                out[b.slot] = b
        return out

    def backends(self) -> list[Backend]:
        return sorted((b for b in self.slots().values() if b.active), key=lambda b: b.slot)

    def table(self) -> list[int]:
        """The Maglev table in use: the backend slot of each entry."""
        active = self.maps["lb_active"][0] & 1
        slots = dict(self.maps["table_b" if active else "table_a"].items())
        return [slots[i] for i in range(self.table_size)]

    def barrier(self) -> None:
        """Wait until no program that read the old table is still running (see filter.py)."""
        self.maps["barrier"][0] = self.maps["lb_active"].fd

    def change(self, add: list[Backend] = (), delete: list[str] = (), xdp_ifindex: int = 0) -> None:
        """Add and delete backends, rebuild the Maglev table and swap it in at once."""
        with self.locked():
            self._change(list(add), [str(ipaddress.ip_address(d)) for d in delete], xdp_ifindex)

    def _change(self, add: list[Backend], delete: list[str], xdp_ifindex: int) -> None:
        slots = self.slots()
        live = {b.name: b for b in slots.values() if b.active}
        for b in add:
            if b.name in live:
                raise LbError(f"{b.name} is already a backend")
        unknown = [d for d in delete if d not in live]
        if unknown:
            raise LbError(f"{', '.join(unknown)} is not a backend (see `backend list`)")
        if len({b.name for b in add}) != len(add):
            raise LbError("a backend is given twice")
        final = [b for n, b in live.items() if n not in delete] + add
        if not final:
            raise LbError("a VIP needs at least one backend (detach the load balancer instead)")
        free = [s for s in range(self.max_backends) if s not in slots or not slots[s].active]
        if len(add) > len(free):
            raise LbError(f"no room for {len(add)} more backends: at most {self.max_backends} "
                          "(attach again with a larger --max-backends)")
        placed = []
        for b, slot in zip(add, free):
            gen = slots[slot].gen + 1 if slot in slots else 1
            placed.append(Backend(b.addr, b.weight, b.dmac, b.smac, b.ifindex, slot, gen, True))
        # new backends first: nothing points at their slots until the table does
        for b in placed:
            self.maps["backend_stats"][b.slot] = ZERO
            if xdp_ifindex and b.ifindex != xdp_ifindex:
                self._set_tx_port(b.slot, b.ifindex)
            self.maps["backends"][b.slot] = b.value()
        keep = [b for b in live.values() if b.name not in delete]
        self._swap_table(keep + placed)
        for name in delete:  # flows cached on them are re-hashed from now on
            b = live[name]
            gone = Backend(b.addr, b.weight, b.dmac, b.smac, b.ifindex, b.slot, b.gen, False)
            self.maps["backends"][b.slot] = gone.value()
            self.maps["tx_ports"].delete(b.slot)

    def _swap_table(self, backends: list[Backend]) -> None:
        names = maglev.build_table([(b.name, b.weight) for b in backends], self.table_size)
        slot_of = {b.name: b.slot for b in backends}
        active = self.maps["lb_active"][0] & 1
        target = self.maps["table_a" if active else "table_b"]
        target.update_many(enumerate(slot_of[name] for name in names))
        self.maps["lb_active"][0] = 1 - active
        self.barrier()

    # --- counters ---

    def backend_counters(self) -> dict[int, tuple[int, int]]:
        m = self.maps["backend_stats"]
        return {b.slot: counter(m, b.slot) for b in self.backends()}

    def totals(self) -> dict[str, tuple[int, int]]:
        m = self.maps["lb_totals"]
        return {name: counter(m, i) for i, name in enumerate(slot_names(m, "lb_stat", "LB_"))}


# --- loading and attaching -----------------------------------------------------------------------

def load_lb(vip: Vip, backends: list[Backend], table_size: int = maglev.DEFAULT_SIZE,
            max_backends: int = DEFAULT_MAX_BACKENDS, flows: int = DEFAULT_FLOWS,
            mode: str = "auto", xdp_ifindex: int = 0, netns: str | None = None):
    """Compile and load the load balancer with ``backends`` (nothing attached):
    returns (engine Object, LbTables). Close both. Backend ifindexes are those of ``netns``
    (None: the caller's namespace)."""
    from ...engine import compile as compile_bpf

    check_sizes(table_size, max_backends)
    spec = compile_bpf(PROGRAM)
    spec.rodata.update({"vip_addr": vip.addr.packed.ljust(16, b"\0"), "vip_family": vip.addr.version,
                        "vip_proto": vip.proto, "vip_port": vip.port, "table_size": table_size})
    for name in ("table_a", "table_b"):
        spec.maps[name].max_entries = table_size
    for name in ("backends", "tx_ports", "backend_stats"):
        spec.maps[name].max_entries = max_backends
    spec.maps["flows"].max_entries = flows
    obj = spec.load()
    try:
        tables = LbTables.of_object(obj, netns=netns)
        tables.write_config(vip, mode)
        tables.change(add=backends, xdp_ifindex=xdp_ifindex)
    except BaseException:
        obj.close()
        raise
    return obj, tables


def attach(iface_name: str, config: LbConfig, netns: str | None = None,
           persistent: bool = True) -> pins.Attachment:
    """Resolve the backends' MACs, load the load balancer and attach it to the interface;
    pinned if ``persistent``."""
    iface = pins.lookup_iface(iface_name, netns)
    resolved = [resolve(iface, b) for b in config.backend_specs()]
    return pins.attach(
        lambda: load_lb(config.parsed_vip(), resolved, config.table_size, config.max_backends,
                        mode=config.mode, xdp_ifindex=iface.ifindex, netns=netns),
        "xdp_lb", iface, config.mode, "lb", persistent)


def open_pinned(iface_name: str, netns: str | None = None) -> LbTables:
    """The tables of the load balancer attached to the interface (by another process)."""
    return LbTables.open_attached(iface_name, netns)

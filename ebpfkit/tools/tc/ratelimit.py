"""tc ratelimit: EDT pacing of what leaves a device, per endpoint, address or cgroup
(tc_ratelimit.bpf.c), with the fq qdisc on the device to hold each packet until its
departure time. A session::

    from ebpfkit.tools import tc
    with tc.open_ratelimit(netns="node", device="up0",
                           rules=["endpoint pod1:eth0 rate 10mbit", "src 10.77.2.2 rate 100mbit horizon 50ms"]) as s:
        s.sample()     # per rule: rate, passed, delayed, dropped, bytes

Rules: ``src ADDR``, ``endpoint NETNS:DEV`` (its addresses) or ``cgroup PATH`` (the sending
socket's cgroup v2, for the node's own processes), then ``rate R`` (bit, kbit, mbit, gbit, or
bps, kbps, mbps, gbps for bytes) and optionally ``horizon T`` (s, ms, us; default 2s): a
packet that could not leave within it is dropped. The rate counts IP bytes (headers and
payload, not the Ethernet header), so a TCP stream's goodput is about 3.5% under it.

fq replaces the device's root qdisc, which must be one the kernel sets by default (noqueue,
pfifo_fast, mq, fq_codel, fq); ``close()`` puts the default back, and so does the engine's
reaper should the process die first (SIGKILL too). Kernels without fq
(CONFIG_NET_SCH_FQ) get NotSupportedError (exit 3): EDT needs it.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass

from ...errors import ConfigError, EbpfkitError, NotSupportedError
from ..config import ToolConfig
from ..session import ToolSession

PROGRAM = os.path.join(os.path.dirname(__file__), "tc_ratelimit.bpf.c")
MATCH_ADDRESS, MATCH_CGROUP = 1, 2  # enum tc_match of tc.h
DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "fq")  # what a device has unless someone chose
_RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
               "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}
_TIME_UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3}
ETH_HLEN = 14
FQ_HANDLE = 0x10000  # 1:, the root qdisc ratelimit puts on the device


class QdiscInUseError(EbpfkitError):
    exit_code = 1


@dataclass(frozen=True)
class RateRule:
    match: str           # "src", "endpoint" or "cgroup"
    value: str           # the address, NETNS:DEV or the cgroup's path
    bytes_per_sec: int   # of IP bytes
    horizon_ns: int

    def __str__(self):  # what parse_rule reads back
        return f"{self.match} {self.value} rate {self.bytes_per_sec}bps horizon {self.horizon_ns // 1000}us"


def parse_rate(text: str) -> int:
    found = re.fullmatch(r"([\d.]+)\s*([a-z]+)", text.strip().lower())
    if not found or found[2] not in _RATE_UNITS or float(found[1]) <= 0:
        raise ConfigError("rules", f"'{text}' is not a rate: a positive number and one of {', '.join(_RATE_UNITS)}")
    value = int(float(found[1]) * _RATE_UNITS[found[2]])
    if value < 1:
        raise ConfigError("rules", f"'{text}' is under a byte a second")
    return value


def parse_time(text: str) -> int:
    found = re.fullmatch(r"([\d.]+)\s*(s|ms|us)", text.strip().lower())
    if not found or float(found[1]) <= 0:
        raise ConfigError("rules", f"'{text}' is not a horizon: a positive number of s, ms or us")
    return int(float(found[1]) * _TIME_UNITS[found[2]])


def parse_rule(text: str) -> RateRule:
    """``src 10.0.0.2 rate 10mbit [horizon 2s]``, ``endpoint NETNS:DEV rate ...``, ``cgroup PATH rate ...``."""
    words = text.split()
    if len(words) not in (4, 6) or words[0] not in ("src", "endpoint", "cgroup") or words[2] != "rate" or \
            (len(words) == 6 and words[4] != "horizon"):
        raise ConfigError("rules", f"'{text}' is not 'src ADDR|endpoint NETNS:DEV|cgroup PATH rate R [horizon T]'")
    match, value = words[0], words[1]
    if match == "src":
        try:
            value = str(ipaddress.IPv4Address(value))
        except ValueError:
            raise ConfigError("rules", f"'{value}' is not an IPv4 address") from None
    if match == "endpoint" and (":" not in value or value.startswith(":") or value.endswith(":")):
        raise ConfigError("rules", f"'{value}' is not NETNS:DEV")
    horizon = parse_time(words[5]) if len(words) == 6 else 2 * 10**9
    return RateRule(match, value, parse_rate(words[3]), horizon)


@dataclass(frozen=True)
class RateLimitConfig(ToolConfig):
    device: str = ""          # the node's device whose egress is paced
    rules: tuple = ()         # RateRules or their text
    netns: str | None = None  # the node's namespace

    def __post_init__(self):
        object.__setattr__(self, "rules", tuple(r if isinstance(r, RateRule) else parse_rule(r) for r in self.rules))
        super().__post_init__()

    def validate(self) -> None:
        if not self.device:
            raise ConfigError("device", "name the device whose egress is paced")
        if not self.rules:
            raise ConfigError("rules", "give at least one rule")


class _Paced(ToolSession):
    """What a running rate limit offers, however it runs: its counters per rule key."""

    _keys: list  # (RateRule, key) pairs
    _rates: object  # the rates map

    def sample(self) -> list[dict]:
        """Per rule (and, for an endpoint's, per address): its rate (bit/s) and what it did since
        it was attached: passed, delayed, dropped (packets), bytes (IP bytes that left)."""
        rows = []
        for rule, key in self._keys:
            state = self._rates[key]
            rows.append({"rule": f"{rule.match} {rule.value}", "key": _key_text(key),
                         "rate_bps": rule.bytes_per_sec * 8, "horizon_ms": rule.horizon_ns / 1e6,
                         "passed": state.passed, "delayed": state.delayed, "dropped": state.dropped,
                         "bytes": state.bytes})
        return rows


class RateLimitSession(_Paced):
    """Attached, with fq on the device, until ``close()``; ``persistent``: pinned, and left
    running (fq included) until ``detach_ratelimit``."""

    def __init__(self, config: RateLimitConfig, persistent: bool = False):
        from ...engine import compile as compile_bpf
        from ...engine import features
        from . import pins
        from .endpoints import device_index

        features.require("tc")
        self.config, self.netns, self.persistent = config, config.netns, persistent
        self.ifindex = device_index(config.device, config.netns, field="device")
        if persistent:  # after the device is found: a usage error is named first
            pins.require_pinnable("ratelimit")
        self._keys = [(rule, key) for rule in config.rules for key in self._rule_keys(rule)]
        self._link = self._obj = self._reaper_key = self._pins = None
        self._pins = pins.fresh_pin_set(config.netns, config.device) if persistent else None
        self._previous_qdisc = None
        try:
            self._previous_qdisc = self._install_fq()
            if self._pins is not None:
                self._pins.create("tc ratelimit", netns=config.netns, device=config.device, ifindex=self.ifindex,
                                  previous_qdisc=self._previous_qdisc,
                                  keys=[[str(rule), key] for rule, key in self._keys])
            spec = compile_bpf(PROGRAM)
            spec.rodata["targ_cgroups"] = any(rule.match == "cgroup" for rule in config.rules)
            self._obj = spec.load()
            self._rates = self._obj.maps["rates"]
            for rule, key in self._keys:
                self._rates[key] = {"bytes_per_sec": rule.bytes_per_sec, "horizon_ns": rule.horizon_ns,
                                    "next_ns": 0, "passed": 0, "delayed": 0, "dropped": 0, "bytes": 0}
            prog = self._obj.programs["tc_ratelimit"]
            self._link = self._in_node(prog.attach_tc, self.ifindex, "egress")
            if self._pins is not None:
                self._pins.pin_maps(self._obj)
                self._pins.pin("prog", prog.fd)
                self._pins.pin_link("link", self._link)
                self._pins.seal()
        except BaseException:
            if self._pins is not None:
                self._pins.remove()
                self._pins = None
                self.persistent = False  # so close() puts the qdisc back
            self.close()
            raise

    @property
    def pinned_at(self) -> str | None:
        return self._pins.path if self._pins is not None else None

    def _rule_keys(self, rule: RateRule) -> list[dict]:
        if rule.match == "cgroup":
            from ...sysinfo.cgroups import NotCgroup2Error, cgroup2_directory

            try:
                return [{"match": MATCH_CGROUP, "pad": 0, "value": cgroup2_directory(rule.value)[1]}]
            except NotCgroup2Error as exc:
                raise ConfigError("rules", str(exc), hint=exc.hint) from None
        if rule.match == "endpoint":
            from .endpoints import resolve

            netns, _, device = rule.value.partition(":")
            addresses = resolve(netns, device, self.netns).addresses
        else:
            addresses = (rule.value,)
        return [{"match": MATCH_ADDRESS, "pad": 0,
                 "value": int.from_bytes(ipaddress.IPv4Address(a).packed, "little")} for a in addresses]

    def _install_fq(self) -> str:
        """fq as the device's root qdisc; the kind it had."""
        from pyroute2.netlink.exceptions import NetlinkError

        from ...net.netns import iproute

        with iproute(self.netns) as ipr:
            roots = [q for q in ipr.get_qdiscs(self.ifindex) if q["parent"] == 0xFFFFFFFF]
            kind = roots[0].get_attr("TCA_KIND") if roots else "noqueue"
            if kind not in DEFAULT_QDISCS:
                raise QdiscInUseError(f"{self.config.device} has a root qdisc of its own ({kind}): it is not "
                                      "replaced", hint=f"`tc qdisc del dev {self.config.device} root` first, if "
                                      "nothing needs it")
            if kind == "fq":
                return kind  # already there, with whatever settings its owner chose
            from ...engine import features

            features.require("fq")  # else NotSupportedError (exit 3) with the hint
            try:
                ipr.tc("replace", "fq", self.ifindex, FQ_HANDLE)
            except NetlinkError as exc:
                if exc.code in (2, 22, 95):  # no such qdisc kind here
                    raise NotSupportedError("fq", "this kernel has no fq qdisc (CONFIG_NET_SCH_FQ), which EDT "
                                            "needs to hold packets until their departure time",
                                            hint="modprobe sch_fq, or a kernel built with it") from None
                raise
        if not self.persistent:  # a run's fq goes with it, however it ends
            self._reaper_key = self._in_node(self._guard_qdisc)
        return kind

    def _guard_qdisc(self) -> int | None:
        """Register the fq with the engine's reaper (in the node's namespace)."""
        from ...engine import reaper
        from ...net.netns import hold_current

        netns = hold_current()
        try:
            return reaper.register_root_qdisc(netns, self.ifindex, "fq", FQ_HANDLE)
        except OSError:
            return None  # no reaper: close() still restores it
        finally:
            os.close(netns)

    def _in_node(self, fn, *args):
        from ...net.netns import in_netns_or_here

        return in_netns_or_here(self.netns, fn, *args)

    def close(self) -> None:
        """Detach and put the qdisc back (a persistent one: only let go of it)."""
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._obj is not None:
            self._obj.close()
            self._obj = None
        if self._reaper_key is not None:
            from ...engine import reaper

            reaper.unregister(self._reaper_key)
            self._reaper_key = None
        if self._previous_qdisc is not None and not self.persistent:
            restore_root_qdisc(self.netns, self.ifindex, self._previous_qdisc)
        self._previous_qdisc = None


class AttachedRateLimit(_Paced):
    """The rate limit an `attach` left on a device, through its pins; ``close()`` lets go."""

    def __init__(self, device: str, netns: str | None = None):
        from ...engine.maps import KernelMap
        from . import pins

        self.device, self.netns = device, netns
        self._pins = pins.attached_pin_set(netns, device)
        record = self._pins.record()
        self._keys = [(parse_rule(text), key) for text, key in record.get("keys", ())]
        self._rates = KernelMap.open_pinned(os.path.join(self._pins.path, "rates"))

    def close(self) -> None:
        self._rates.close()


def restore_root_qdisc(netns: str | None, ifindex: int, previous: str) -> None:
    """Put the kernel's default root qdisc back on the device, unless fq was there before us
    or the root is no longer ours."""
    from pyroute2.netlink.exceptions import NetlinkError

    from ...net.netns import iproute

    if previous == "fq":
        return
    try:
        with iproute(netns) as ipr:
            roots = [q for q in ipr.get_qdiscs(ifindex) if q["parent"] == 0xFFFFFFFF]
            if roots and roots[0].get_attr("TCA_KIND") == "fq" and roots[0]["handle"] == FQ_HANDLE:
                ipr.tc("del", index=ifindex, root=True)  # the kernel puts its default back
    except NetlinkError:
        pass  # the device is gone, or its qdisc was changed since


def attach_ratelimit(config: RateLimitConfig | None = None, **settings) -> RateLimitSession:
    """Pinned: it runs on (fq too) after this process, until ``detach_ratelimit``."""
    return RateLimitSession(RateLimitConfig.given(config, **settings), persistent=True)


def attached_ratelimit(device: str, netns: str | None = None) -> AttachedRateLimit:
    return AttachedRateLimit(device, netns)


def detach_ratelimit(device: str, netns: str | None = None) -> bool:
    """Detach what `attach` left on the device, put its qdisc back, remove the pins; False if
    nothing was attached there."""
    from . import pins

    pin_set = pins.pin_set(netns, device)
    record = pin_set.record() or {}
    detached = pin_set.remove()
    if record.get("ifindex"):
        restore_root_qdisc(netns, record["ifindex"], record.get("previous_qdisc", "noqueue"))
    return detached


def _key_text(key: dict) -> str:
    if key["match"] == MATCH_CGROUP:
        return f"cgroup id {key['value']}"
    return str(ipaddress.IPv4Address(key["value"].to_bytes(4, "little")))


def open_ratelimit(config: RateLimitConfig | None = None, **settings) -> RateLimitSession:
    """Pace in the foreground: ``close()`` (the end of a ``with``) detaches and restores."""
    return RateLimitSession(RateLimitConfig.given(config, **settings))

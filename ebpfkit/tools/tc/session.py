"""tc's redirect sessions: the fast path of tc_redirect.bpf.c in a node's namespace. No
click, no printing, no formats::

    from ebpfkit.tools import tc
    with tc.open_redirect(netns="node", endpoints=[("pod1", "eth0"), ("pod2", "eth0")],
                          uplinks=["up0"]) as session:
        session.sample()      # {"to_endpoint": {"packets": .., "bytes": ..}, "routed": .., ...}
        session.add_endpoint("pod3", "eth0")
    tc.attach_redirect(config)               # the same, pinned: runs on after this process
    with tc.attached_redirect("node") as session: ...   # what an attach left: same methods
    tc.detach_redirect("node")

``open_redirect`` loads the program into the node's namespace, fills its endpoint map and
attaches it at the ingress of every endpoint's node-side veth and of the uplinks (a tcx
bpf_link where the kernel has one, 6.6+; a clsact filter before); ``close()`` detaches it,
and so does the kernel if the process dies. ``attach_redirect`` pins maps, program and links
(pins.py): tcx links only, as a clsact filter is not a link that can be pinned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..config import ToolConfig
from ..session import ToolSession
from . import pins
from .endpoints import Endpoint, device_index, resolve
from .steering import SteerRule, parse_rule

PROGRAM = os.path.join(os.path.dirname(__file__), "tc_redirect.bpf.c")
VERDICTS = ("to_endpoint", "routed", "to_neigh", "passed", "steered")  # enum tc_verdict of tc.h, in order


@dataclass(frozen=True)
class RedirectConfig(ToolConfig):
    endpoints: tuple = ()    # (namespace, device) of each endpoint's veth end
    uplinks: tuple = ()      # the node's devices to the outside (their ingress gets the program too)
    netns: str | None = None  # the node's namespace (None: this process's)
    route: bool = True       # also send what is for elsewhere out by the FIB (else: to the stack)
    steering: tuple = ()     # SteerRules, or their text: "udp:53=pod2:eth0", "tcp:53=dns0"

    def __post_init__(self):
        object.__setattr__(self, "endpoints", tuple(tuple(e) for e in self.endpoints))
        object.__setattr__(self, "uplinks", tuple(self.uplinks))
        object.__setattr__(self, "steering", tuple(r if isinstance(r, SteerRule) else parse_rule(r)
                                                   for r in self.steering))
        super().__post_init__()


class _Redirect(ToolSession):
    """What a running fast path offers, however it runs: its endpoints (changed live) and
    counters. A subclass gives ``_map``, ``_counters``, ``netns`` and how a device gets the
    program (``_attach``) and loses it (``_detach``)."""

    netns: str | None
    endpoints: dict
    steering: dict  # (protocol, port) -> SteerRule

    def steer(self, rule: SteerRule | str) -> SteerRule:
        """Send what goes to the rule's port to its target from now on (replacing a rule of
        that port)."""
        rule = rule if isinstance(rule, SteerRule) else parse_rule(rule)
        self._steering.update(rule.key, rule.value(self.netns))
        self.steering[(rule.protocol, rule.port)] = rule
        self._changed()
        return rule

    def unsteer(self, protocol: str, port: int) -> None:
        """Stop steering that port."""
        rule = self.steering.pop((protocol, port), None)
        if rule is None:
            from ...errors import ConfigError

            raise ConfigError("steering", f"{protocol}:{port} is not steered here")
        self._steering.pop(rule.key, None)
        self._changed()

    def _changed(self) -> None:
        """The endpoints or steering changed (a pinned one records them)."""

    def _record(self) -> dict:
        return {"endpoints": [list(key) for key in self.endpoints], "steering": [str(r) for r in self.steering.values()]}

    def add_endpoint(self, netns: str, device: str) -> Endpoint:
        """Serve one more endpoint: its addresses reach it directly from now on."""
        endpoint = resolve(netns, device, self.netns)
        self._map.update_many(endpoint.map_entries().items())
        self.endpoints[(netns, device)] = endpoint
        self._attach(endpoint.node_ifindex)
        self._changed()
        return endpoint

    def remove_endpoint(self, netns: str, device: str) -> None:
        """Stop serving an endpoint: its packets take the node's stack again."""
        endpoint = self.endpoints.pop((netns, device), None)
        if endpoint is None:
            from ...errors import ConfigError

            raise ConfigError("endpoints", f"{device} in namespace '{netns}' is not an endpoint here")
        for key in endpoint.map_entries():
            self._map.pop(key, None)
        self._detach(endpoint.node_ifindex)
        self._changed()

    def sample(self) -> dict:
        """What the program did since it was attached: {verdict: {"packets": n, "bytes": n}}."""
        totals = {}
        for i, name in enumerate(VERDICTS):
            per_cpu = self._counters[i]
            totals[name] = {"packets": sum(c.packets for c in per_cpu), "bytes": sum(c.bytes for c in per_cpu)}
        return totals

    def _in_node(self, fn, *args):
        from ...net.netns import in_netns_or_here

        return in_netns_or_here(self.netns, fn, *args)


class RedirectSession(_Redirect):
    """Loaded and attached until ``close()``; ``persistent``: pinned, and left running then."""

    def __init__(self, config: RedirectConfig, persistent: bool = False):
        from ...engine import compile as compile_bpf
        from ...engine import features

        for feature in ("tc", "redirect_peer", "redirect_neigh"):
            features.require(feature)
        self.config, self.netns, self.endpoints, self.steering = config, config.netns, {}, {}
        self._links: dict[int, object] = {}  # node ifindex -> its link
        uplinks = [device_index(name, config.netns) for name in config.uplinks]
        resolved = [resolve(ns, dev, config.netns) for ns, dev in config.endpoints]
        if persistent:  # after the input is checked: a usage error is named first
            pins.require_pinnable("redirect")
        self._pins = pins.fresh_pin_set(config.netns) if persistent else None
        self._obj = None
        try:
            if self._pins is not None:
                self._pins.create("tc redirect", netns=config.netns, uplinks=list(config.uplinks))
            spec = compile_bpf(PROGRAM)
            spec.rodata["targ_route"] = config.route
            self._obj = spec.load()
            self._map, self._counters = self._obj.maps["endpoints"], self._obj.maps["counters"]
            self._steering = self._obj.maps["steering"]
            self._prog = self._obj.programs[pins.PROGRAM]
            if self._pins is not None:
                self._pins.pin_maps(self._obj)
                self._pins.pin("prog", self._prog.fd)
            for endpoint in resolved:
                self.add_endpoint(endpoint.netns, endpoint.device)
            for rule in config.steering:
                self.steer(rule)
            for ifindex in uplinks:
                self._attach(ifindex)
            if self._pins is not None:
                self._pins.seal(**self._record())
        except BaseException:
            if self._pins is not None:
                self._pins.remove()
                self._pins = None
            self.close()
            raise

    @property
    def pinned_at(self) -> str | None:
        return self._pins.path if self._pins is not None else None

    @property
    def uplinks(self) -> tuple:
        return self.config.uplinks

    @property
    def prog_id(self) -> int:
        return self._prog.info().id

    def _changed(self) -> None:
        if self._pins is not None and self._pins.record().get("pins"):  # sealed: a change since
            self._pins.seal(**self._record())

    def _attach(self, ifindex: int) -> None:
        if ifindex in self._links:
            return
        link = self._in_node(self._prog.attach_tc, ifindex, "ingress")
        self._links[ifindex] = link
        if self._pins is not None:
            self._pins.pin_link(pins.link_name(ifindex), link)

    def _detach(self, ifindex: int) -> None:
        link = self._links.pop(ifindex, None)
        if self._pins is not None:
            self._pins.drop(pins.link_name(ifindex))
        if link is not None:
            link.close()

    def close(self) -> None:
        """Detach (a persistent one: only let go of it) and free."""
        for link in self._links.values():
            link.close()
        self._links.clear()
        if self._obj is not None:
            self._obj.close()
            self._obj = None


class AttachedRedirect(_Redirect):
    """The fast path an `attach` left in a node's namespace, through its pins: endpoints
    changed there are changed for good. ``close()`` only lets go of it."""

    def __init__(self, netns: str | None = None):
        from ...engine.maps import KernelMap
        from ...engine.pinned import KernelProgram

        self.netns = netns
        self._pins = pins.attached_pin_set(netns)
        record = self._pins.record()
        self.uplinks = tuple(record.get("uplinks", ()))
        self._map = KernelMap.open_pinned(os.path.join(self._pins.path, "endpoints"))
        self._counters = KernelMap.open_pinned(os.path.join(self._pins.path, "counters"))
        self._steering = KernelMap.open_pinned(os.path.join(self._pins.path, "steering"))
        self.steering = {(r.protocol, r.port): r for r in map(parse_rule, record.get("steering", ()))}
        self._prog = KernelProgram.open_pinned(os.path.join(self._pins.path, "prog"))
        self.endpoints = {}
        for ns, dev in record.get("endpoints", ()):
            try:
                self.endpoints[(ns, dev)] = resolve(ns, dev, netns)
            except Exception:  # noqa: BLE001 - gone since: listed, but nothing to resolve
                self.endpoints[(ns, dev)] = None

    @property
    def prog_id(self) -> int:
        return self._prog.info().id

    def add_endpoint(self, netns: str, device: str) -> Endpoint:
        with self._pins.locked():
            return super().add_endpoint(netns, device)

    def remove_endpoint(self, netns: str, device: str) -> None:
        with self._pins.locked():
            super().remove_endpoint(netns, device)

    def steer(self, rule: SteerRule | str) -> SteerRule:
        with self._pins.locked():
            return super().steer(rule)

    def unsteer(self, protocol: str, port: int) -> None:
        with self._pins.locked():
            super().unsteer(protocol, port)

    def _changed(self) -> None:
        self._pins.seal(**self._record())

    def _attach(self, ifindex: int) -> None:
        from ...engine import links

        name = pins.link_name(ifindex)
        if name in self._pins.names():
            return
        link = self._in_node(links.tc, self._prog, ifindex, "ingress")
        try:
            self._pins.pin_link(name, link)
        finally:
            link.close()  # the pin holds it

    def _detach(self, ifindex: int) -> None:
        self._pins.drop(pins.link_name(ifindex))

    def close(self) -> None:
        for resource in (self._map, self._counters, self._steering, self._prog):
            resource.close()


def open_redirect(config: RedirectConfig | None = None, **settings) -> RedirectSession:
    """Start the fast path with ``config``, or with a RedirectConfig built from keywords."""
    return RedirectSession(RedirectConfig.given(config, **settings))


def attach_redirect(config: RedirectConfig | None = None, **settings) -> RedirectSession:
    """The fast path pinned, to run on after this process; the session returned reads it
    until closed (which leaves it attached)."""
    return RedirectSession(RedirectConfig.given(config, **settings), persistent=True)


def attached_redirect(netns: str | None = None) -> AttachedRedirect:
    return AttachedRedirect(netns)


def detach_redirect(netns: str | None = None) -> bool:
    """Detach what `attach` left in the node's namespace and remove its pins; False if
    nothing was attached there."""
    return pins.pin_set(netns).remove()

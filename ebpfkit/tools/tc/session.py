"""tc's redirect session: load tc_redirect.bpf.c into the node's namespace, fill its endpoint
map, attach it at the ingress of every endpoint's node-side veth and of the uplinks (a tcx
bpf_link where the kernel has one, 6.6+; a clsact filter before), and read its counters. No
click, no printing, no formats::

    from ebpfkit.tools import tc
    with tc.open_redirect(netns="node", endpoints=[("pod1", "eth0"), ("pod2", "eth0")],
                          uplinks=["up0"]) as session:
        session.sample()      # {"to_endpoint": {"packets": .., "bytes": ..}, "routed": .., ...}
        session.add_endpoint("pod3", "eth0")

What the program does not own (not IPv4, for the node itself, no route) goes on to the node's
stack; ``close()`` (the end of the ``with``) detaches everything, and so does the kernel if
the process dies (tcx links; clsact filters through the engine's reaper).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..config import ToolConfig
from ..session import ToolSession
from .endpoints import Endpoint, device_index, resolve

PROGRAM = os.path.join(os.path.dirname(__file__), "tc_redirect.bpf.c")
VERDICTS = ("to_endpoint", "routed", "to_neigh", "passed")  # enum tc_verdict of tc.h, in order


@dataclass(frozen=True)
class RedirectConfig(ToolConfig):
    endpoints: tuple = ()    # (namespace, device) of each endpoint's veth end
    uplinks: tuple = ()      # the node's devices to the outside (their ingress gets the program too)
    netns: str | None = None  # the node's namespace (None: this process's)
    route: bool = True       # also send what is for elsewhere out by the FIB (else: to the stack)

    def __post_init__(self):
        object.__setattr__(self, "endpoints", tuple(tuple(e) for e in self.endpoints))
        object.__setattr__(self, "uplinks", tuple(self.uplinks))
        super().__post_init__()


class RedirectSession(ToolSession):
    """Loaded and attached until ``close()``; ``endpoints`` what it serves."""

    def __init__(self, config: RedirectConfig):
        from ...engine import compile as compile_bpf
        from ...engine import features

        for feature in ("tc", "redirect_peer", "redirect_neigh"):
            features.require(feature)
        self.config = config
        self.endpoints: dict[tuple[str, str], Endpoint] = {}
        self._links: dict[int, object] = {}  # node ifindex -> its link
        uplinks = [device_index(name, config.netns) for name in config.uplinks]
        resolved = [resolve(ns, dev, config.netns) for ns, dev in config.endpoints]
        spec = compile_bpf(PROGRAM)
        spec.rodata["targ_route"] = config.route
        self._obj = spec.load()
        self._map = self._obj.maps["endpoints"]
        self._prog = self._obj.programs["tc_redirect"]
        try:
            for endpoint in resolved:
                self._serve(endpoint)
            for ifindex in uplinks:
                self._attach(ifindex)
        except BaseException:
            self.close()
            raise

    def add_endpoint(self, netns: str, device: str) -> Endpoint:
        """Serve one more endpoint (its addresses reach it from now on)."""
        endpoint = resolve(netns, device, self.config.netns)
        self._serve(endpoint)
        return endpoint

    def remove_endpoint(self, netns: str, device: str) -> None:
        """Stop serving an endpoint: its packets take the node's stack again."""
        endpoint = self.endpoints.pop((netns, device))
        for key in endpoint.map_entries():
            self._map.pop(key, None)
        link = self._links.pop(endpoint.node_ifindex, None)
        if link is not None:
            link.close()

    def sample(self) -> dict:
        """What the program did since it started: {verdict: {"packets": n, "bytes": n}}."""
        counters = self._obj.maps["counters"]
        return {name: {"packets": counters[i].sum().packets, "bytes": counters[i].sum().bytes}
                for i, name in enumerate(VERDICTS)}

    def _serve(self, endpoint: Endpoint) -> None:
        self._map.update_many(endpoint.map_entries().items())
        self.endpoints[(endpoint.netns, endpoint.device)] = endpoint
        self._attach(endpoint.node_ifindex)

    def _attach(self, ifindex: int) -> None:
        if ifindex in self._links:
            return
        if self.config.netns is None:
            self._links[ifindex] = self._prog.attach_tc(ifindex, "ingress")
        else:
            from ...net.netns import in_netns

            self._links[ifindex] = in_netns(self.config.netns, self._prog.attach_tc, ifindex, "ingress")

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
        if getattr(self, "_obj", None) is not None:
            self._obj.close()
            self._obj = None


def open_redirect(config: RedirectConfig | None = None, **settings) -> RedirectSession:
    """Start the fast path with ``config``, or with a RedirectConfig built from keywords."""
    return RedirectSession(RedirectConfig.given(config, **settings))

"""Steering: what is sent to a port goes to one endpoint, or one device of the node, whatever
its destination address (the whitepaper's DNS fast path: queries to the cluster's DNS address
answered by a node-local cache). A rule is ``PROTO:PORT`` (tcp or udp) and a target: an
endpoint ``NETNS:DEV`` (into its namespace, as if routed there) or a node device ``DEV``
(into that device's ingress: the node's own stack takes it as arrived there). The target
must hold the destination address itself, as a node-local cache holds the DNS address."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from .endpoints import node_device, resolve, target_value

PROTOCOLS = {"tcp": 6, "udp": 17}


@dataclass(frozen=True)
class SteerRule:
    protocol: str  # tcp or udp
    port: int
    target: str    # NETNS:DEV (an endpoint) or DEV (a node device)

    def __str__(self):
        return f"{self.protocol}:{self.port}={self.target}"

    @property
    def key(self) -> dict:
        """Its struct tc_steer_key: the port in network order."""
        return {"protocol": PROTOCOLS[self.protocol], "pad": 0,
                "port": int.from_bytes(self.port.to_bytes(2, "big"), "little")}

    def value(self, node_netns: str | None) -> dict:
        """Its struct tc_endpoint, the target found now (ConfigError if it is not there)."""
        netns, sep, device = self.target.partition(":")
        if sep:
            endpoint = resolve(netns, device, node_netns)
            return endpoint.map_value()
        ifindex, mac = node_device(self.target, node_netns)
        return target_value(ifindex, mac, mac, to_ingress=True)


def parse_port(spec: str) -> tuple[str, int]:
    """``udp:53`` -> ("udp", 53); ConfigError naming what is wrong."""
    protocol, sep, port = spec.partition(":")
    if not sep or protocol.lower() not in PROTOCOLS:
        raise ConfigError("steering", f"'{spec}' is not PROTO:PORT with PROTO tcp or udp")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError("steering", f"'{spec}': the port must be 1 to 65535")
    return protocol.lower(), int(port)


def parse_rule(spec: str) -> SteerRule:
    """``udp:53=pod2:eth0`` or ``udp:53=dns0``."""
    port_spec, sep, target = spec.partition("=")
    if not sep or not target or target.startswith(":") or target.endswith(":"):
        raise ConfigError("steering", f"'{spec}' is not PROTO:PORT=NETNS:DEV (an endpoint) or PROTO:PORT=DEV "
                          "(a node device)")
    return SteerRule(*parse_port(port_spec), target)

"""Endpoints: a namespace behind a veth pair whose other end is in the node's namespace, as a
pod is. Found through pyroute2 from the endpoint's side (its namespace and device): its MAC
and IPv4 addresses there, and its peer on the node (the device tc programs attach to)."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from ...errors import ConfigError
from ...net.netns import NoSuchNetnsError, iproute


@dataclass(frozen=True)
class Endpoint:
    netns: str                  # the endpoint's namespace
    device: str                 # its end of the veth pair there
    mac: str
    addresses: tuple[str, ...]  # its IPv4 addresses
    node_device: str            # the other end, in the node's namespace
    node_ifindex: int
    node_mac: str

    def map_entries(self) -> dict:
        """The endpoint map's {key: value} for each of its addresses (keys in network order)."""
        return {_address_key(a): self.map_value() for a in self.addresses}

    def map_value(self) -> dict:
        """Its struct tc_endpoint: into its namespace by its node-side veth's peer."""
        return target_value(self.node_ifindex, self.mac, self.node_mac, to_ingress=False)


def resolve(netns: str, device: str, node_netns: str | None = None) -> Endpoint:
    """The endpoint ``device`` in namespace ``netns``, its peer in ``node_netns`` (None: this
    process's). ConfigError (exit 2) naming what is wrong: no such namespace or device, not
    a veth, no IPv4 address, its peer not in the node's namespace."""
    try:
        with iproute(netns) as ipr:
            link = _one_link(ipr, device, f"namespace '{netns}'", "endpoints")
            if _kind(link) != "veth":
                raise ConfigError("endpoints", f"{device} in namespace '{netns}' is a {_kind(link) or 'device'}, "
                                  "not a veth: an endpoint is one end of a veth pair whose other end is on the node")
            own_index, peer_index = link["index"], link.get_attr("IFLA_LINK")
            mac = link.get_attr("IFLA_ADDRESS")
            addresses = tuple(a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=own_index, family=socket.AF_INET))
    except NoSuchNetnsError as exc:
        raise ConfigError("endpoints", str(exc)) from None
    if not addresses:
        raise ConfigError("endpoints", f"{device} in namespace '{netns}' has no IPv4 address: nothing would reach it")
    try:
        ipr = iproute(node_netns)
    except NoSuchNetnsError as exc:
        raise ConfigError("netns", str(exc)) from None
    with ipr:
        peer = _link_by_index(ipr, peer_index)
        if peer is None or _kind(peer) != "veth" or peer.get_attr("IFLA_LINK") != own_index:
            where = f"namespace '{node_netns}'" if node_netns else "this namespace"
            raise ConfigError("endpoints", f"the other end of {device} (namespace '{netns}') is not in {where}, "
                              "the node's: an endpoint's veth pair joins its namespace to the node's")
        return Endpoint(netns, device, mac, addresses, peer.get_attr("IFLA_IFNAME"), peer["index"],
                        peer.get_attr("IFLA_ADDRESS"))


def device_index(name: str, netns: str | None = None, field: str = "uplinks") -> int:
    """The ifindex of the node's device ``name``; ConfigError (naming ``field``) if there is none."""
    try:
        with iproute(netns) as ipr:
            return _one_link(ipr, name, f"namespace '{netns}'" if netns else "this namespace", field)["index"]
    except NoSuchNetnsError as exc:
        raise ConfigError("netns", str(exc)) from None


def _one_link(ipr, name: str, where: str, field: str):
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise ConfigError(field, f"no device '{name}' in {where}")
    return ipr.link("get", index=found[0])[0]


def _link_by_index(ipr, index: int | None):
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        return ipr.link("get", index=index)[0] if index else None
    except NetlinkError:  # no device of that index here
        return None


def _kind(link) -> str | None:
    info = link.get_attr("IFLA_LINKINFO")
    return info.get_attr("IFLA_INFO_KIND") if info is not None else None


def target_value(ifindex: int, mac: str, node_mac: str, to_ingress: bool) -> dict:
    """A struct tc_endpoint (tc.h)."""
    return {"ifindex": ifindex, "mac": _mac_bytes(mac), "node_mac": _mac_bytes(node_mac),
            "to_ingress": int(to_ingress), "pad": b"\0\0\0"}


def node_device(name: str, netns: str | None = None) -> tuple[int, str]:
    """The ifindex and MAC of the node's device ``name``; ConfigError if there is none."""
    try:
        with iproute(netns) as ipr:
            link = _one_link(ipr, name, f"namespace '{netns}'" if netns else "this namespace", "steering")
    except NoSuchNetnsError as exc:
        raise ConfigError("netns", str(exc)) from None
    return link["index"], link.get_attr("IFLA_ADDRESS") or "00:00:00:00:00:00"


def _mac_bytes(mac: str) -> bytes:
    return bytes(int(part, 16) for part in mac.split(":"))


def _address_key(address: str) -> int:
    """An IPv4 address as the map's __be32 key: its bytes in network order, read natively."""
    return int.from_bytes(ipaddress.IPv4Address(address).packed, "little")

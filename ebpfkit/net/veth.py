"""veth pairs inside test namespaces, through pyroute2 (never in the root namespace)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .netns import NetNS, iproute

if TYPE_CHECKING:
    from pyroute2 import IPRoute


@dataclass(frozen=True)
class VethEnd:
    netns: str          # namespace name
    ifname: str
    ifindex: int        # valid inside ``netns``
    mac: str
    address: str | None  # IPv4 address without prefix, if one was set


@dataclass(frozen=True)
class VethPair:
    a: VethEnd
    b: VethEnd


def _ns_name(ns) -> str:
    return ns.name if isinstance(ns, NetNS) else ns


def _open(ns: str) -> IPRoute:
    return iproute(ns)


def create_veth(netns, peer_netns=None, names=("ek0", "ek1"),
                addresses=("10.199.0.1/24", "10.199.0.2/24")) -> VethPair:
    """A veth pair with end ``a`` in ``netns`` and end ``b`` in ``peer_netns`` (default: also
    ``netns``), each given its address (``None`` for none) and set up.

    Deleting either namespace deletes the pair, which is how it is normally cleaned up.
    """
    ns_a = _ns_name(netns)
    ns_b = _ns_name(peer_netns) if peer_netns is not None else ns_a
    name_a, name_b = names
    with _open(ns_a) as ipr:
        ipr.link("add", ifname=name_a, kind="veth", peer=name_b)
        if ns_b != ns_a:
            # created together, then one end moved: needs no netns ids between the two
            ipr.link("set", index=ipr.link_lookup(ifname=name_b)[0], net_ns_fd=ns_b)
    ends = []
    for ns, name, addr in ((ns_a, name_a, addresses[0]), (ns_b, name_b, addresses[1])):
        with _open(ns) as ipr:
            index = ipr.link_lookup(ifname=name)[0]
            ip = None
            if addr:
                iface = ipaddress.ip_interface(addr)
                ipr.addr("add", index=index, address=str(iface.ip), prefixlen=iface.network.prefixlen)
                ip = str(iface.ip)
            ipr.link("set", index=index, state="up")
            mac = ipr.get_links(index)[0].get("address")
        ends.append(VethEnd(ns, name, index, mac, ip))
    return VethPair(*ends)


def delete_veth(pair: VethPair) -> None:
    """Delete the pair explicitly (deleting one end removes both); quiet if already gone."""
    with _open(pair.a.netns) as ipr:
        found = ipr.link_lookup(ifname=pair.a.ifname)
        if found:
            ipr.link("del", index=found[0])


# IFLA_XDP_ATTACHED, which pyroute2 may give as a number or as iproute2's name
_XDP_MODES = {1: "native", 2: "generic", 3: "offload", 4: "multi",
              "xdp": "native", "xdpgeneric": "generic", "xdpoffload": "offload", "xdpmulti": "multi"}


def xdp_attached(netns, ifname: str) -> dict:
    """The XDP program the kernel reports on a device: ``{}`` when none, else
    ``{"mode": "native"|"generic"|"offload"|"multi", "prog_id": id}``."""
    with _open(_ns_name(netns)) as ipr:
        link = ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0]
    xdp = link.get_attr("IFLA_XDP")
    mode = _XDP_MODES.get(xdp.get_attr("IFLA_XDP_ATTACHED")) if xdp else None
    if mode is None:
        return {}
    return {"mode": mode, "prog_id": xdp.get_attr("IFLA_XDP_PROG_ID")}

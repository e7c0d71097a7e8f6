"""Network namespaces, veth pairs and child cgroups (pyroute2 / cgroupfs) for tools and tests."""

from .cgroup import ChildCgroup, remove_cgroup
from .netns import NetNS, in_netns, list_netns, unique_name
from .veth import VethEnd, VethPair, create_veth, delete_veth, xdp_attached

__all__ = ["ChildCgroup", "remove_cgroup", "NetNS", "in_netns",
           "list_netns", "unique_name", "VethEnd", "VethPair", "create_veth", "delete_veth",
           "xdp_attached"]

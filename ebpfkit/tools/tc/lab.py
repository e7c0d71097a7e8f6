"""A node made of network namespaces, to try `tc` on and to test and measure it: a "node"
namespace with a veth to each of two "pod" namespaces and an uplink veth to a "remote" one,
addresses and routes as a one-node cluster has them, forwarding on, and an nftables counter
on the node's forward hook (what the node's stack routes, netfilter sees; what tc redirect
hands over directly, it does not)::

    with LabNode() as lab:
        lab.pods[0].address, lab.remote.address, lab.forwarded()

Two lab nodes of different networks (``LabNode(network="10.78")``) linked by ``connect`` are
two nodes of a cluster: each routes the other's pods over a veth between them.

Everything lives in namespaces the lab creates and removes; nothing touches this host's own.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from dataclasses import dataclass

from ...net import NetNS, create_veth
from ...net.netns import in_netns
from ...net.netns import iproute as iproute_in

NETWORK = "10.77"  # the pods' and the remote's addresses: 10.77.N.2 behind 10.77.N.1 on the node
LINKS = "10.76.0"  # between two lab nodes: .1 on the first, .2 on the second
NFT_TABLE = "ebpfkit_lab"


@dataclass(frozen=True)
class Place:
    netns: str          # its namespace
    device: str         # its veth end there
    address: str        # its IPv4 address
    node_device: str    # the veth's other end, on the node
    gateway: str        # the node's address on that veth


class LabNode:
    """The namespaces, veths, routes and the nftables counter; removed on exit."""

    def __init__(self, pods: int = 2, purpose: str = "tclab", network: str = NETWORK):
        self.purpose, self.pod_count, self.network = purpose, pods, network
        self.subnet = f"{network}.0.0/16"
        self._namespaces: list[NetNS] = []
        self.node: NetNS | None = None
        self.pods: list[Place] = []
        self.remote: Place | None = None
        self._forwarded_before = 0

    def __enter__(self) -> "LabNode":
        try:
            self.node = self._netns("node")
            self._run(self.node.name, _write, "/proc/sys/net/ipv4/ip_forward", "1")
            for n in range(1, self.pod_count + 1):
                self.pods.append(self._place(f"pod{n}", n, f"ekpod{n}"))
            self.remote = self._place("remote", 9, "ekup")
            self._nft(f"add table inet {NFT_TABLE}")
            self._nft(f"add chain inet {NFT_TABLE} forward {{ type filter hook forward priority 0 ; }}")
            self._nft(f"add rule inet {NFT_TABLE} forward counter")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for ns in reversed(self._namespaces):  # the veths go with them
            ns.close()
        self._namespaces.clear()

    def forwarded(self) -> int:
        """Packets the node's stack forwarded since the lab was made or ``reset_forwarded()``
        (its forward hook's nftables counter)."""
        return self._forward_counter() - self._forwarded_before

    def reset_forwarded(self) -> None:
        # a rule's own counter is not reset by `nft reset counters` (named counters only)
        self._forwarded_before = self._forward_counter()

    def _forward_counter(self) -> int:
        out = self._nft(f"-j list chain inet {NFT_TABLE} forward")
        for item in json.loads(out)["nftables"]:
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    return expr["counter"]["packets"]
        raise RuntimeError(f"no counter in the lab's forward chain: {out}")

    def add_address(self, netns: str, cidr: str, device: str = "lo") -> None:
        """Give ``device`` of ``netns`` one more address: what a DNS cache answering for a
        service address holds. A device that is missing is made, as one end of a veth pair
        whose ends are both there (a dummy device's stand-in: not every kernel has dummy)."""
        with iproute_in(netns) as ipr:
            found = ipr.link_lookup(ifname=device)
            if not found:
                ipr.link("add", ifname=device, kind="veth", peer=device + "p")
                for name in (device, device + "p"):
                    ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
                found = ipr.link_lookup(ifname=device)
            address, prefix = cidr.split("/")
            ipr.addr("add", index=found[0], address=address, prefixlen=int(prefix))

    def add_route(self, netns: str, destination: str, gateway: str) -> None:
        with iproute_in(netns) as ipr:
            ipr.route("add", dst=destination, gateway=gateway)

    def connect(self, other: "LabNode") -> tuple[str, str]:
        """Link this node to ``other`` (a lab node of another network) as two nodes of a
        cluster are: a veth between the node namespaces and a route each way to the other's
        pods. The veth's device on this node and on ``other``."""
        devices = ("ekpeer1", "ekpeer2")  # made in this node's namespace, then one end moved
        create_veth(self.node, other.node, names=devices, addresses=(f"{LINKS}.1/30", f"{LINKS}.2/30"))
        self.add_route(self.node.name, other.subnet, f"{LINKS}.2")
        self.add_route(other.node.name, self.subnet, f"{LINKS}.1")
        return devices

    def nft(self, command: str) -> str:
        """An nft command in the node's namespace (a rule of a test's own)."""
        return self._nft(command)

    def transfer(self, source: Place, destination: Place, size: int, chunk: int = 65536,
                 while_sending=None) -> int:
        """Send ``size`` bytes over TCP from ``source`` to ``destination``; the bytes that
        arrived. ``while_sending()``, if given, runs once half of them are sent."""
        server = in_netns(destination.netns, socket.create_server, (destination.address, 0))
        received: list[int] = []

        def serve():
            conn, _ = server.accept()
            with conn:
                total = 0
                while data := conn.recv(1 << 16):
                    total += len(data)
                received.append(total)

        receiver = threading.Thread(target=serve, daemon=True)
        receiver.start()
        try:
            port = server.getsockname()[1]
            with in_netns(source.netns, socket.create_connection, (destination.address, port), 10) as client:
                block, sent = b"\0" * chunk, 0
                while sent < size:
                    if while_sending is not None and sent >= size // 2:
                        while_sending()
                        while_sending = None
                    n = min(chunk, size - sent)
                    client.sendall(block[:n])
                    sent += n
                client.shutdown(socket.SHUT_WR)
                receiver.join(30)
        finally:
            server.close()
        return received[0] if received else 0

    def serve_udp(self, netns: str, address: str, port: int, answer: bytes):
        """A UDP server in ``netns`` answering every datagram with ``answer`` (a thread);
        close() the socket returned to stop it."""
        sock = in_netns(netns, socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((address, port))

        def serve():
            while True:
                try:
                    _, peer = sock.recvfrom(512)
                    sock.sendto(answer, peer)
                except OSError:  # closed
                    return

        threading.Thread(target=serve, daemon=True).start()
        return sock

    def ask_udp(self, source: Place, address: str, port: int, timeout: float = 2.0) -> bytes | None:
        """One datagram from ``source`` and the answer (None if none came)."""
        with in_netns(source.netns, socket.socket, socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.sendto(b"query", (address, port))
            try:
                return sock.recv(512)
            except TimeoutError:
                return None

    def _netns(self, role: str) -> NetNS:
        ns = NetNS(f"{self.purpose}-{role}").create()
        self._namespaces.append(ns)
        return ns

    def _place(self, role: str, n: int, node_device: str) -> Place:
        ns = self._netns(role)
        gateway, address = f"{self.network}.{n}.1", f"{self.network}.{n}.2"
        create_veth(self.node, ns, names=(node_device, "eth0"), addresses=(f"{gateway}/24", f"{address}/24"))
        with ns.iproute() as ipr:
            if role == "remote":  # the pods are behind the node
                ipr.route("add", dst=self.subnet, gateway=gateway)
            else:
                ipr.route("add", dst="default", gateway=gateway)
        return Place(ns.name, "eth0", address, node_device, gateway)

    def _nft(self, command: str) -> str:
        return self._run(self.node.name, _nft, command)

    @staticmethod
    def _run(netns: str, fn, *args):
        return in_netns(netns, fn, *args)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:  # /proc/sys/net is the writing thread's namespace's
        f.write(text)


def _nft(command: str) -> str:
    done = subprocess.run(["nft", *command.split()], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"nft {command}: {done.stderr.strip()}")
    return done.stdout

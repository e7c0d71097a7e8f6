"""Where an XDP tool's program lives after the command that attached it has exited, and
the interface it is attached to (possibly inside a named network namespace).

Pins: ``/sys/fs/bpf/ebpfkit/xdp/<iface>/`` for an interface of the initial network namespace;
``/sys/fs/bpf/ebpfkit/xdp/<iface>@<netns>/`` for one in a named namespace (``ip netns``), or
``<iface>@netns-<inode>`` for an unnamed one: bpffs is shared by every namespace, interface
names are not. The directory (a PinSet) holds every map, the program (``prog``) and the XDP
link (``link``). A foreground ``run`` pins nothing: only its process holds the link, so the
kernel detaches the program and frees everything when the process dies, however it dies;
later commands reach its maps through the program the interface runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...engine import inventory, pinned
from ...engine.constants import LinkType
from ...engine.pinset import COMPLETE, NONE, PinSet
from ...errors import EbpfkitError

PROGRAMS = ("xdp_filter", "xdp_lb")  # our programs' names, as the kernel lists them


class InterfaceError(EbpfkitError):
    """An interface or namespace that does not exist: a usage error."""

    exit_code = 2


class NotAttachedError(EbpfkitError):
    exit_code = 1


class AlreadyAttachedError(EbpfkitError):
    exit_code = 1


@dataclass(frozen=True)
class Iface:
    name: str
    netns: str | None  # a named namespace, or None for the caller's
    ifindex: int
    mac: str

    @property
    def where(self) -> str:
        return f"{self.name} (netns {self.netns})" if self.netns else self.name


def iproute(netns: str | None):
    """An IPRoute in ``netns`` (None: the caller's); a missing namespace is an InterfaceError."""
    from ...net.netns import NoSuchNetnsError, iproute as netns_iproute

    try:
        return netns_iproute(netns)
    except NoSuchNetnsError as exc:
        raise InterfaceError(str(exc)) from None


def lookup_iface(name: str, netns: str | None = None) -> Iface:
    """The interface ``name`` of ``netns`` (None: the caller's namespace), or InterfaceError."""
    with iproute(netns) as ipr:
        found = ipr.link_lookup(ifname=name)
        if not found:
            where = f" in network namespace '{netns}'" if netns else ""
            raise InterfaceError(f"no interface '{name}'{where} (see `ip link`)")
        link = ipr.get_links(found[0])[0]
    return Iface(name, netns, found[0], link.get_attr("IFLA_ADDRESS") or "00:00:00:00:00:00")


def attached_prog_id(iface: Iface) -> int | None:
    """The id of the XDP program the kernel reports on the interface, or None."""
    with iproute(iface.netns) as ipr:
        links = ipr.get_links(iface.ifindex)
    xdp = links[0].get_attr("IFLA_XDP") if links else None
    if not xdp:
        return None
    return xdp.get_attr("IFLA_XDP_PROG_ID") or None


def pinned_prog_id(path: str) -> int | None:
    """The id of the program pinned in the pin set at ``path`` (None: not pinned there)."""
    return pinned.pinned_prog_id(os.path.join(path, "prog"))


def pin_set(iface: str, netns: str | None = None) -> PinSet:
    from ...net.netns import netns_label

    # the initial namespace: the plain interface name
    label = os.path.basename(netns) if netns is not None else netns_label()
    return PinSet(f"xdp/{iface}@{label}" if label else f"xdp/{iface}")


def unpinned_program(iface: Iface, names=PROGRAMS) -> int | None:
    """The id of the program of ours (by name) the interface runs without pins: a
    foreground run's, held only by its process."""
    prog = attached_prog_id(iface)
    found = inventory.program(prog) if prog else None
    return prog if found is not None and found.name in names else None


# --- attaching and detaching ---------------------------------------------------------------------

@dataclass
class Attachment:
    """An XDP program attached to an interface, with its tables. ``close()`` detaches a
    foreground one (pinned nothing: only our link's fd holds it); a persistent one stays
    attached through its pins, only our fds are closed."""

    iface: Iface
    pins: PinSet | None
    obj: object
    tables: object
    link: object
    prog_id: int

    @property
    def persistent(self) -> bool:
        return self.pins is not None

    @property
    def path(self) -> str | None:
        return self.pins.path if self.pins else None

    def close(self) -> None:
        self.tables.close()
        self.obj.close()


def attach(load, prog_name: str, iface: Iface, mode: str, what: str, persistent: bool) -> Attachment:
    """``load()`` -> (obj, tables); attach its ``prog_name`` to ``iface`` and, if
    ``persistent``, pin maps, program and link: all or nothing. A foreground attachment pins
    nothing, so the kernel detaches it when the process dies, however it dies."""
    pins = prepare_pin_set(iface, what)
    if persistent:
        pins.create(f"xdp {what}", iface=iface.name, netns=iface.netns)
    obj = tables = None
    try:
        obj, tables = load()
        prog = obj.programs[prog_name]
        link = attach_program(prog, iface, mode)
        if persistent:
            pins.pin_maps(obj)
            pins.pin("prog", prog.fd)
            pins.pin_link("link", link)
            pins.seal()
    except BaseException:
        if tables is not None:
            tables.close()
        if obj is not None:
            obj.close()
        if persistent:
            pins.remove()
        raise
    return Attachment(iface, pins if persistent else None, obj, tables, link, prog.info().id)


def attach_program(prog, iface: Iface, mode: str):
    """Attach the XDP program to ``iface`` (in its namespace) through a bpf_link."""
    from ...net import in_netns

    attach = lambda: prog.attach_xdp(iface.ifindex, mode)  # noqa: E731
    try:
        return in_netns(iface.netns, attach) if iface.netns else attach()
    except EbpfkitError as exc:
        if "busy" in str(exc).lower():
            exc.hint = (f"another XDP program is attached to {iface.where}: `ip link set dev "
                        f"{iface.name} xdp off` (or that tool's detach) first")
        raise


def prepare_pin_set(iface: Iface, what: str) -> PinSet:
    """The pin set for ``iface``: refuses a live one, clears a stale or partial one."""
    pins = pin_set(iface.name, iface.netns)
    st = pins.state()
    if st == COMPLETE:
        raise AlreadyAttachedError(f"an ebpfkit XDP program is already attached to {iface.where} "
                                   f"(pinned at {pins.path})",
                                   hint=f"`ebpfkit xdp {what} detach --iface {iface.name}"
                                        f"{' --netns ' + iface.netns if iface.netns else ''}` first")
    if st != NONE:
        pins.remove()
    return pins


def detach_iface(iface_name: str, netns: str | None = None) -> bool:
    """Detach whatever ebpfkit XDP program is attached to the interface (pinned, or a
    foreground run's) and remove its pins. False when nothing was attached (stale pins are
    removed all the same)."""
    pins = pin_set(iface_name, netns)
    iface = None
    try:
        iface = lookup_iface(iface_name, netns)
    except InterfaceError:
        if not pins.exists():
            raise
    if pins.exists():
        return pins.remove()
    prog = unpinned_program(iface)
    # a foreground run's link: its owner's fd then dangles
    return prog is not None and pinned.detach_links_of(LinkType.XDP, prog)

"""Where an XDP tool's program lives after the command that attached it has exited, and
the interface it is attached to (possibly inside a named network namespace).

Pins: ``/sys/fs/bpf/ebpfkit/xdp/<iface>/`` for an interface of the initial network namespace;
``/sys/fs/bpf/ebpfkit/xdp/<iface>@<netns>/`` for one in a named namespace (``ip netns``), or
``<iface>@netns-<inode>`` for an unnamed one: bpffs is shared by every namespace, interface
names are not. The directory holds every map, the program (``prog``) and, for a persistent
attach, the XDP link (``link``). A foreground ``run`` pins no link, so the kernel detaches the
program when the process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass

from ...engine import pinned
from ...engine.constants import LinkType
from ...engine.mounts import PIN_ROOT, ensure_bpffs
from ...errors import EbpfkitError

XDP_PIN_ROOT = os.path.join(PIN_ROOT, "xdp")


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


def pin_dir(iface: str, netns: str | None = None) -> str:
    from ...net.netns import netns_label

    # the initial namespace: the plain interface name
    label = os.path.basename(netns) if netns is not None else netns_label()
    return os.path.join(XDP_PIN_ROOT, f"{iface}@{label}" if label else iface)


def make_pin_dir(path: str) -> str:
    ensure_bpffs()
    os.makedirs(path, exist_ok=True)
    return path


def remove_pin_dir(path: str) -> None:
    """Unpin everything in ``path`` and remove it, then the empty parents up to bpffs."""
    if os.path.isdir(path):
        for name in os.listdir(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(path, name))
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
    for parent in (XDP_PIN_ROOT, PIN_ROOT):
        try:
            os.rmdir(parent)
        except OSError:
            break  # not empty (another tool or interface), or gone


@contextlib.contextmanager
def locked(path: str):
    """Serialise changes to one pin directory (two `rules add` at once would race)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def pinned_prog_id(path: str) -> int | None:
    return pinned.pinned_prog_id(os.path.join(path, "prog"))


def state(path: str, iface: Iface | None) -> str:
    """'none' (no pins), 'live' (our pinned program is what the interface runs) or 'stale'
    (pins left by a process that died, or the interface is gone)."""
    if not os.path.isdir(path):
        return "none"
    prog = pinned_prog_id(path)
    if iface is None or prog is None:
        return "stale"
    return "live" if attached_prog_id(iface) == prog else "stale"


def detach(path: str, iface: Iface | None) -> bool:
    """Detach our program from the interface (a pinned link, or a foreground run's link found
    by program id) and remove the pins. True if something was attached."""
    detached = pinned.detach_pinned_link(os.path.join(path, "link")) == 0
    prog = pinned_prog_id(path)
    if prog is not None and iface is not None and attached_prog_id(iface) == prog:
        # a foreground run's link: its owner's fd then dangles
        detached |= pinned.detach_links_of(LinkType.XDP, prog)
    remove_pin_dir(path)
    return detached


# --- attaching and detaching ---------------------------------------------------------------------

@dataclass
class Attachment:
    """An XDP program attached to an interface, with its tables. ``close()`` detaches a
    foreground one (no pinned link) and removes its pins; a persistent one stays attached,
    only our fds are closed."""

    iface: Iface
    path: str
    obj: object
    tables: object
    link: object
    persistent: bool

    def close(self) -> None:
        self.tables.close()
        self.obj.close()
        if not self.persistent:
            remove_pin_dir(self.path)


def load_and_attach(load, prog_name: str, iface: Iface, mode: str, path: str, persistent: bool):
    """``load()`` -> (obj, tables); pin the maps under ``path`` and attach: all or nothing."""
    obj = tables = None
    try:
        obj, tables = load()
        obj.pin_maps(path)
        link = attach_program(obj, prog_name, iface, mode, path, persistent)
    except BaseException:
        if tables is not None:
            tables.close()
        if obj is not None:
            obj.close()
        remove_pin_dir(path)
        raise
    return obj, tables, link


def attach_program(obj, prog_name: str, iface: Iface, mode: str, path: str, persistent: bool):
    """Attach ``obj``'s XDP program to ``iface`` (in its namespace) and pin prog (+ link)."""
    from ...net import in_netns

    prog = obj.programs[prog_name]
    pinned.pin(prog.fd, os.path.join(path, "prog"))
    attach = lambda: prog.attach_xdp(iface.ifindex, mode)  # noqa: E731
    try:
        link = in_netns(iface.netns, attach) if iface.netns else attach()
    except EbpfkitError as exc:
        if "busy" in str(exc).lower():
            exc.hint = (f"another XDP program is attached to {iface.where}: `ip link set dev "
                        f"{iface.name} xdp off` (or that tool's detach) first")
        raise
    if persistent:
        link.pin(os.path.join(path, "link"))
    return link


def prepare_pin_dir(iface: Iface, what: str) -> str:
    """The pin directory for ``iface``: refuses a live one, clears a stale one."""
    path = pin_dir(iface.name, iface.netns)
    st = state(path, iface)
    if st == "live":
        raise AlreadyAttachedError(f"an ebpfkit XDP program is already attached to {iface.where} "
                                   f"(pinned at {path})",
                                   hint=f"`ebpfkit xdp {what} detach --iface {iface.name}"
                                        f"{' --netns ' + iface.netns if iface.netns else ''}` first")
    if st == "stale":
        remove_pin_dir(path)
    return make_pin_dir(path)


def detach_iface(iface_name: str, netns: str | None = None) -> bool:
    """Detach whatever ebpfkit XDP program is pinned for the interface and remove its pins.
    False when nothing was attached (stale pins are removed all the same)."""
    path = pin_dir(iface_name, netns)
    iface = None
    try:
        iface = lookup_iface(iface_name, netns)
    except InterfaceError:
        if not os.path.isdir(path):
            raise
    if not os.path.isdir(path):
        return False
    return detach(path, iface)

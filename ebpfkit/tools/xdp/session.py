"""xdp's sessions: the filter and the load balancer as a notebook or the exporter use them,
with no click, printing or formats::

    from ebpfkit.tools import xdp
    with xdp.open_filter(iface="eth1", rules=["src 192.0.2.0/24"], mode="generic") as session:
        time.sleep(1)
        doc = session.sample()     # {"rules": [{id, rule, packets, bytes, pps, bps}], "totals": [...]}
        session.tables.apply(add=[xdp.parse_rule("proto icmp")])   # rules change while it runs
    with xdp.open_lb(iface="eth1", vip="10.0.0.100:80/tcp", backends=["10.0.0.11", "10.0.0.12"]) as lb:
        lb.sample()["backends"]    # per backend: packets, bytes, pps, bps
    with xdp.attached_filter("eth1") as session:   # the one `ebpfkit xdp filter attach` left
        session.sample()

``open_filter`` / ``open_lb`` take a FilterConfig / LbConfig or its settings as keywords and
attach a program that pins nothing, as `run` does: ``close()`` (the end of the ``with``)
detaches it, and the kernel does if the process dies. ``attached_filter`` / ``attached_lb``
read a program another command attached (pinned by `attach`, or a `run`'s); their
``close()`` only lets go of its maps. ``sample()`` documents are stats.py's.
"""

from __future__ import annotations

from ..session import ToolSession
from . import pins
from .filter import FilterConfig
from .filter import attach as attach_filter
from .filter import open_pinned as filter_tables
from .lb import LbConfig
from .lb import attach as attach_lb
from .lb import open_pinned as lb_tables
from .rules import Rule, parse_rule
from .stats import FilterStats, LbStats


class XdpSession(ToolSession):
    """One XDP program: ``sample()`` its counters (with rates since the previous sample),
    ``tables`` its maps (changed live), ``iface`` where it runs (None if that is gone)."""

    STATS: type = FilterStats  # the counter view of the program's kind
    PROGRAM = "xdp_filter"     # its BPF program's name

    def __init__(self, tables, iface: pins.Iface | str, netns: str | None = None,
                 attachment: pins.Attachment | None = None):
        """``iface``: the Iface, or for another command's program only its name (looked up
        on first use of ``.iface``: reading the counters needs no netlink)."""
        self.tables, self.attachment = tables, attachment
        self._iface, self._unresolved = (None, (iface, netns)) if isinstance(iface, str) else (iface, None)
        name, netns = self._unresolved or (iface.name, iface.netns)
        self._stats = self.STATS(tables, name, netns)

    @property
    def iface(self) -> pins.Iface | None:
        if self._unresolved is not None:
            name, netns = self._unresolved
            self._unresolved = None
            try:
                self._iface = pins.lookup_iface(name, netns)
            except pins.InterfaceError:
                pass  # pins of an interface since removed: the counters still read
        return self._iface

    @property
    def prog_id(self) -> int | None:
        """The program this session attached (None for one attached by another command)."""
        return self.attachment.prog_id if self.attachment else None

    def sample(self) -> dict:
        return self._stats.sample()

    def current(self) -> bool:
        """Whether the program this session reads still runs (another command's may have
        been detached, or replaced by a new attach, since the session opened)."""
        return self.tables.current()

    def program_ids(self) -> dict[str, int]:
        """{name: id} of the program running on the interface (ours, or another command's)."""
        prog = self.prog_id or self.tables.prog_id or (pins.attached_prog_id(self.iface) if self.iface else None)
        return {self.PROGRAM: prog} if prog else {}

    def close(self) -> None:
        """Detach what this session attached; of a program another command attached, only
        close our maps."""
        (self.attachment or self.tables).close()


class FilterSession(XdpSession):
    """The filter: ``tables`` is a FilterTables (``rules()``, ``apply(add=, delete=)``, ``replace()``)."""

    STATS = FilterStats


class LbSession(XdpSession):
    """The load balancer: ``tables`` is an LbTables (``backends()``, ``change(add=, delete=)``)."""

    STATS = LbStats
    PROGRAM = "xdp_lb"


def open_filter(config: FilterConfig | None = None, *, iface: str, netns: str | None = None,
                rules=(), **settings) -> FilterSession:
    """Attach the filter to ``iface`` (of network namespace ``netns``) with ``rules``: Rule
    objects or their text ("src 10.0.0.0/8 proto tcp dport 22")."""
    config = FilterConfig.given(config, **settings)
    rules = [r if isinstance(r, Rule) else parse_rule(r) for r in rules]
    att = attach_filter(iface, rules, config, netns=netns, persistent=False)
    return FilterSession(att.tables, att.iface, attachment=att)


def open_lb(config: LbConfig | None = None, *, iface: str, netns: str | None = None,
            **settings) -> LbSession:
    """Attach the load balancer to ``iface`` (backend MACs resolved in ``netns``)."""
    att = attach_lb(iface, LbConfig.given(config, **settings), netns=netns, persistent=False)
    return LbSession(att.tables, att.iface, attachment=att)


def attached_filter(iface: str, netns: str | None = None) -> FilterSession:
    """The filter another command attached to ``iface``; NotAttachedError if there is none."""
    return FilterSession(filter_tables(iface, netns), iface, netns)


def attached_lb(iface: str, netns: str | None = None) -> LbSession:
    """The load balancer another command attached to ``iface``; NotAttachedError if there is none."""
    return LbSession(lb_tables(iface, netns), iface, netns)

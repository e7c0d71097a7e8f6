"""sockmap's session: accelerate one cgroup in the foreground, or read an `enable`d one from
its pins, and hand out what `sockmap status` shows as a plain document. No click, no
printing, no formats: the CLI, the exporter and a notebook read it the same way::

    from ebpfkit.tools import sockmap
    with sockmap.open(cgroup="/sys/fs/cgroup/web", ports=(8080,)) as session:   # nothing pinned
        ...                                   # processes in that cgroup talk over TCP
        record = session.sample()             # sockets, msgs/bytes redirected and fallen back
    sockmap.attached("/sys/fs/cgroup/web").sample()        # an `ebpfkit sockmap enable`d cgroup
    [s.sample() for s in sockmap.attached_all()]           # every enabled cgroup

A sample's counters (``msgs_redirected``, ``bytes_redirected``, ``msgs_fallback``,
``bytes_fallback``, ``sockets_added``, ``add_failed``) count since the acceleration started;
``sockets`` is how many sockets the map holds now.
"""

from __future__ import annotations

from ..session import ToolSession
from .cgroups import SockmapUsageError, require_privileges, resolve_cgroup
from .core import Accelerator, Enablement, Options, enablements, find


class NotEnabledError(SockmapUsageError):
    """``attached()`` found no acceleration pinned for the cgroup."""


class Session(ToolSession):
    """sockops + sk_msg attached to one cgroup until ``close()``; nothing is pinned, so a
    killed process leaves nothing behind."""

    def __init__(self, cgroup: str | None, options: Options):
        self._acc = Accelerator(cgroup, options)  # checks the cgroup and the privileges
        existing = find(self._acc.cgroup)
        if existing is not None and existing.complete:
            raise SockmapUsageError(f"sockmap acceleration is already enabled (pinned) on {self._acc.cgroup}",
                                    hint=f"ebpfkit sockmap disable --cgroup {self._acc.cgroup}")
        self._acc.start()
        self.cgroup, self.cgroup_id = self._acc.cgroup, self._acc.cgroup_id

    def sample(self) -> dict:
        """Where, with which options, sockets in the map, messages and bytes redirected and
        fallen back (counted since open)."""
        return self._acc.status()

    def sockets(self) -> list[dict]:
        """The sockets in the map: family, local and remote address and port."""
        return self._acc.sockets()

    def close(self) -> None:
        self._acc.close()


class Attached(ToolSession):
    """The counters of an acceleration `enable` pinned; it holds nothing open between
    samples, and ``close()`` leaves the acceleration in place."""

    def __init__(self, enablement: Enablement):
        self._enablement = enablement
        self.cgroup_id = enablement.cgroup_id

    def sample(self) -> dict:
        """The same document as ``Session.sample()``, counted since `enable`."""
        return self._enablement.status()

    def sockets(self) -> list[dict]:
        return self._enablement.sockets()

    def close(self) -> None:
        pass


def open(config: Options | None = None, *, cgroup: str | None, **settings) -> Session:  # noqa: A001
    """Accelerate ``cgroup`` (a cgroup v2 directory; None: the v2 root) with ``config``, or
    with Options built from keyword settings (ports, ipv6, skb_verdict, max_sockets)."""
    return Session(cgroup, Options.given(config, **settings))


def attached(cgroup: str | None = None) -> Attached:
    """The acceleration `ebpfkit sockmap enable` pinned on ``cgroup`` (None: the v2 root);
    NotEnabledError (exit 2) when there is none."""
    require_privileges()
    found = find(cgroup)
    if found is None or not found.complete:
        where = resolve_cgroup(cgroup)[0]
        raise NotEnabledError(f"sockmap acceleration is not enabled on {where}",
                              hint=f"ebpfkit sockmap enable --cgroup {where}")
    return Attached(found)


def attached_all() -> list[Attached]:
    """Every pinned acceleration (also those whose cgroup was removed since); [] when none."""
    require_privileges()
    return [Attached(e) for e in enablements() if e.complete]


def status(cgroup: str | None = None, sockets: bool = False) -> list[dict]:
    """What `sockmap status` lists: one sample per pinned acceleration (only ``cgroup``'s when
    given; [] when there is none), with its ``connections`` when ``sockets``."""
    if cgroup is None:
        found = attached_all()
    else:
        try:
            found = [attached(cgroup)]
        except NotEnabledError:
            found = []
    records = []
    for sampler in found:
        record = sampler.sample()
        if sockets:
            record["connections"] = sampler.sockets()
        records.append(record)
    return records

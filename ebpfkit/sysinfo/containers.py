"""Which container a process is in, from its cgroup (v2) path.

Container engines name a container's cgroup after its 64-hex id:

    docker (systemd driver)   /system.slice/docker-<id>.scope
    docker (cgroupfs driver)  /docker/<id>
    containerd CRI            /kubepods.slice/.../cri-containerd-<id>.scope   or  /kubepods/.../<id>
    CRI-O                     /kubepods.slice/.../crio-<id>.scope             or  /kubepods/.../crio-<id>
    podman                    /machine.slice/libpod-<id>.scope[/container]    or  /libpod_parent/libpod-<id>
    other systemd scopes      /.../<engine>-<id>.scope

Kubernetes puts each pod's containers under a pod cgroup named after the pod's UID (which
``Container.pod_uid`` gives; pod names and namespaces are the API server's, not the kernel's):

    systemd driver   /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, _ for ->.slice/...
    cgroupfs driver  /kubepods/<qos>/pod<uid>/...          (guaranteed pods: no <qos> level)

BPF programs see a cgroup by its id (``bpf_get_current_cgroup_id()``), which is the inode
number of the cgroup's directory: ``CgroupPaths`` turns ids back into paths (through
``sysinfo.cgroups``, cached for a stream of events).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .cgroups import cgroup2_mount, walk_cgroups

SHORT_ID = 12  # as `docker ps` shows ids
CGROUP_LABELS = ("cgroup", "container", "pod_uid")  # what cgroup_labels() says of a cgroup

_ID_COMPONENT = re.compile(r"^(?:(?P<prefix>[a-z][a-z0-9_-]*?)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
_RUNTIMES = {"docker": "docker", "cri-containerd": "containerd", "containerd": "containerd",
             "crio": "cri-o", "libpod": "podman", "nerdctl": "nerdctl"}
_POD_COMPONENT = re.compile(r"^(?:kubepods(?:-[a-z]+)*-)?pod(?P<uid>[0-9a-f]{8}[-_](?:[0-9a-f]{4}[-_]){3}[0-9a-f]{12})"
                            r"(?:\.slice)?$")
# parents that say which engine made a bare <id> directory (cgroupfs drivers)
_BARE_PARENTS = {"docker": "docker", "libpod_parent": "podman", "kubepods": "kubernetes"}


@dataclass(frozen=True)
class Container:
    id: str       # the full 64-hex id
    runtime: str  # docker, containerd, cri-o, podman, kubernetes (cgroupfs: engine unknown), ...
    pod_uid: str | None = None  # the Kubernetes pod it belongs to (its UID), if any

    @property
    def short_id(self) -> str:
        return self.id[:SHORT_ID]


def parse_container(cgroup_path: str) -> Container | None:
    """The container whose cgroup ``cgroup_path`` is or lies under (the innermost one when
    containers nest); None for cgroups of no container."""
    parts = [p for p in cgroup_path.split("/") if p]
    for index in range(len(parts) - 1, -1, -1):
        m = _ID_COMPONENT.match(parts[index])
        if not m:
            continue
        prefix = m.group("prefix")
        if prefix is not None and prefix.endswith("conmon"):  # podman/CRI-O's monitor, not the container
            continue
        runtime = _bare_runtime(parts[:index]) if prefix is None else _RUNTIMES.get(prefix, prefix)
        return Container(m.group("id"), runtime, pod_uid(cgroup_path))
    return None


def pod_uid(cgroup_path: str) -> str | None:
    """The UID of the Kubernetes pod whose cgroup ``cgroup_path`` is or lies under (the
    systemd driver's underscores given back as dashes); None outside kubepods."""
    parts = [p for p in cgroup_path.split("/") if p]
    if not parts or not (parts[0] == "kubepods" or parts[0].startswith("kubepods.")):
        return None
    for part in parts[1:]:
        m = _POD_COMPONENT.match(part)
        if m:
            return m.group("uid").replace("_", "-")
    return None


def cgroup_labels(path: str | None) -> dict[str, str]:
    """``{"cgroup", "container", "pod_uid"}`` of the cgroup at ``path`` (relative to the
    cgroup2 root): the path, the short id of the container it is (or is in), the UID of its
    Kubernetes pod; empty strings for what does not apply (Prometheus's "no label")."""
    if not path:
        return dict.fromkeys(CGROUP_LABELS, "")
    container = parse_container(path)
    return {"cgroup": path, "container": container.short_id if container else "",
            "pod_uid": (container.pod_uid if container else pod_uid(path)) or ""}


def _bare_runtime(ancestors: list[str]) -> str:
    for name in reversed(ancestors):
        for parent, runtime in _BARE_PARENTS.items():
            if name == parent or name.startswith(parent + "."):
                return runtime
    return "container"


class CgroupPaths:
    """cgroup id -> path relative to the cgroup2 root ("/system.slice/docker-<id>.scope").

    The hierarchy is walked once, and again only when an id is not known yet (a new cgroup),
    at most once per ``refresh()`` period, so a burst of unknown ids costs one walk."""

    def __init__(self, root: str | None = None):
        self.root = root if root is not None else cgroup2_mount()
        self._paths: dict[int, str] = {}
        self._walked = False

    def path(self, cgroup_id: int) -> str | None:
        if cgroup_id not in self._paths and not self._walked:
            self._walk()
        return self._paths.get(cgroup_id)

    def container(self, cgroup_id: int) -> Container | None:
        path = self.path(cgroup_id)
        return parse_container(path) if path else None

    def refresh(self) -> None:
        """Allow one more walk of the hierarchy (call once per interval)."""
        self._walked = False

    def _walk(self) -> None:
        self._walked = True
        if not self.root:
            return
        for cid, directory in walk_cgroups(self.root):
            rel = os.path.relpath(directory, self.root)
            self._paths[cid] = "/" if rel == "." else "/" + rel

    def ids_of_container(self, container_id: str) -> set[int]:
        """Ids of the cgroups of containers whose id starts with ``container_id`` (and of
        every cgroup below them); empty when no such container runs."""
        self._walk()
        prefix = container_id.lower()
        return {cid for cid, path in self._paths.items()
                if (c := parse_container(path)) is not None and c.id.startswith(prefix)}

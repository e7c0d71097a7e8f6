"""Container ids from cgroup paths, for every engine's naming; cgroup ids back to paths."""

import os

import pytest

from ebpfkit.sysinfo.cgroups import cgroup2_mount
from ebpfkit.sysinfo.containers import CgroupPaths, Container, cgroup_labels, parse_container
from ebpfkit.sysinfo.mounts import MountTable

ID = "3f2a9c0e1b7d4c5a8e6f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
ID2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
POD = "kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice"


@pytest.mark.parametrize("path, runtime", [
    (f"/system.slice/docker-{ID}.scope", "docker"),
    (f"/docker/{ID}", "docker"),
    (f"/kubepods.slice/kubepods-burstable.slice/{POD}/cri-containerd-{ID}.scope", "containerd"),
    (f"/kubepods/burstable/pod1a2b3c4d-5e6f/{ID}", "kubernetes"),
    (f"/kubepods.slice/kubepods-besteffort.slice/{POD}/crio-{ID}.scope", "cri-o"),
    (f"/kubepods/besteffort/pod1a2b/crio-{ID}", "cri-o"),
    (f"/machine.slice/libpod-{ID}.scope", "podman"),
    (f"/machine.slice/libpod-{ID}.scope/container", "podman"),  # podman's init sub-cgroup
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope", "podman"),
    (f"/libpod_parent/libpod-{ID}", "podman"),
    (f"/system.slice/nerdctl-{ID}.scope", "nerdctl"),
    (f"/system.slice/someengine-{ID}.scope", "someengine"),  # any systemd scope named by an id
    (f"/system.slice/docker-{ID}.scope/", "docker"),
])
def test_container_id_from_each_engines_cgroup_path(path, runtime):
    found = parse_container(path)
    assert (found.id, found.runtime) == (ID, runtime)
    assert found.short_id == ID[:12]


POD_UID = "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"


@pytest.mark.parametrize("path, pod_uid", [
    (f"/kubepods.slice/kubepods-burstable.slice/{POD}/cri-containerd-{ID}.scope", POD_UID),  # systemd driver
    (f"/kubepods.slice/kubepods-besteffort.slice/{POD.replace('burstable', 'besteffort')}/crio-{ID}.scope",
     POD_UID),
    (f"/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{ID}.scope", POD_UID),  # guaranteed
    (f"/kubepods/burstable/pod{POD_UID}/{ID}", POD_UID),  # cgroupfs driver
    (f"/kubepods/pod{POD_UID}/crio-{ID}", POD_UID),
    (f"/system.slice/docker-{ID}.scope", None),  # no pod outside kubepods
    (f"/docker/pod{POD_UID}/{ID}", None),
    (f"/kubepods/burstable/pod1a2b/{ID}", None),  # not a UID
])
def test_pod_uid_from_kubepods_paths(path, pod_uid):
    assert parse_container(path) == Container(ID, parse_container(path).runtime, pod_uid)


@pytest.mark.parametrize("path", [
    "/", "", "/user.slice/user-1000.slice/session-3.scope", "/system.slice/docker.service",
    "/system.slice/containerd.service", f"/system.slice/docker-{ID[:63]}.scope",  # not 64 hex
    f"/system.slice/docker-{ID.upper()}.scope",  # ids are lowercase
    f"/machine.slice/libpod-conmon-{ID}.scope",  # podman's monitor, not the container
    f"/kubepods.slice/crio-conmon-{ID}.scope",
    "/kubepods.slice/kubepods-burstable.slice/" + POD,  # a pod, not one of its containers
])
def test_cgroups_of_no_container(path):
    assert parse_container(path) is None


def test_nested_containers_give_the_innermost():
    path = f"/docker/{ID2}/kubelet.slice/kubepods.slice/cri-containerd-{ID}.scope"
    assert parse_container(path) == Container(ID, "containerd")


def test_conmon_under_a_container_is_skipped_for_the_enclosing_one():
    assert parse_container(f"/docker/{ID2}/libpod-conmon-{ID}.scope") == Container(ID2, "docker")


def test_bare_id_without_known_parent():
    assert parse_container(f"/actions_job/{ID}") == Container(ID, "container")


def test_cgroup_ids_are_directory_inodes(tmp_path):
    scope = tmp_path / "system.slice" / f"docker-{ID}.scope"
    child = scope / "init"
    child.mkdir(parents=True)
    paths = CgroupPaths(str(tmp_path))
    assert paths.path(os.stat(tmp_path).st_ino) == "/"
    assert paths.path(os.stat(scope).st_ino) == f"/system.slice/docker-{ID}.scope"
    assert paths.container(os.stat(child).st_ino) == Container(ID, "docker")
    assert paths.container(os.stat(tmp_path / "system.slice").st_ino) is None
    assert paths.ids_of_container(ID[:6]) == {os.stat(scope).st_ino, os.stat(child).st_ino}
    assert paths.ids_of_container(ID2[:6]) == set()


def test_new_cgroups_are_found_after_refresh(tmp_path):
    paths = CgroupPaths(str(tmp_path))
    assert paths.path(12345678901) is None  # one walk; unknown ids don't walk again ...
    late = tmp_path / f"docker-{ID}.scope"
    late.mkdir()
    assert paths.path(os.stat(late).st_ino) is None
    paths.refresh()  # ... until the next interval
    assert paths.path(os.stat(late).st_ino) == f"/docker-{ID}.scope"


def test_cgroup2_mount_from_the_mount_table():
    proc = "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    cgroup2 = "31 25 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert cgroup2_mount(MountTable(proc + cgroup2)) == "/sys/fs/cgroup/unified"
    assert cgroup2_mount(MountTable(proc)) is None
    assert CgroupPaths(root="").path(1) is None  # no hierarchy: nothing, no error


@pytest.mark.parametrize("path, labels", [
    ("/", {"cgroup": "/", "container": "", "pod_uid": ""}),
    (None, {"cgroup": "", "container": "", "pod_uid": ""}),
    (f"/system.slice/docker-{ID}.scope", {"cgroup": f"/system.slice/docker-{ID}.scope",
                                          "container": ID[:12], "pod_uid": ""}),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/"
     f"cri-containerd-{ID}.scope", {"container": ID[:12], "pod_uid": POD_UID}),
    (f"/kubepods/besteffort/pod{POD_UID}/crio-{ID}", {"container": ID[:12], "pod_uid": POD_UID}),
    (f"/kubepods/besteffort/pod{POD_UID}", {"container": "", "pod_uid": POD_UID}),  # the pod's own cgroup
])
def test_cgroup_paths_become_container_and_pod_labels(path, labels):
    found = cgroup_labels(path)
    assert {k: found[k] for k in labels} == labels
    assert found["cgroup"] == (path or "")

"""Feature probes against what this kernel itself reports, found apart from the probes: kprobes
from /proc/kallsyms, BPF trampolines from a real fentry program counting this process's sleeps,
BPF-LSM from securityfs. On the machines that build ebpfkit (6.18: no kprobes, fentry/fexit/LSM
refused with EPERM) and on an ordinary distribution kernel alike; everything else works; and
probing leaves nothing behind."""

from __future__ import annotations

import glob
import os
import tempfile
import threading
import time

import pytest

import ebpfkit
from ebpfkit.bcc.probe import bcc_available
from ebpfkit.engine import features as F
from ebpfkit.engine import inventory
from ebpfkit.engine.constants import MapType, ProgType
from ebpfkit.errors import NotSupportedError, PermissionDeniedError
from helpers import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="feature probes need root"),
]

SUPPORTED_HERE = ["tracepoint", "raw_tp", "tp_btf", "uprobe", "uprobe_multi", "perf_event", "xdp_native",
                  "xdp_generic", "tc", "sockops", "sk_msg", "cgroup_skb", "cgroup_sock_addr",
                  "prog_test_run", "btf", "kernel_btf", "libbpf", "tracefs", "bpffs"]

FENTRY_SRC = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

const volatile int targ_tgid = 0;
u64 sleeps = 0;

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(count_sleeps)
{
    if ((bpf_get_current_pid_tgid() >> 32) == targ_tgid)
        __sync_fetch_and_add(&sleeps, 1);
    return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def _in_kallsyms(symbol: str) -> bool:
    with open("/proc/kallsyms") as f:
        return any(line.split()[2] == symbol for line in f)


def _trampolines_work() -> bool:
    """Whether a real fentry program loads, attaches and counts this process's 5 sleeps."""
    spec = ebpfkit.compile(text=FENTRY_SRC, name="features_truth.bpf.c")
    try:
        obj = spec.load({"targ_tgid": os.getpid()})
    except NotSupportedError:
        return False
    with obj:
        obj.attach()
        for _ in range(5):
            time.sleep(0.0001)
        assert obj.bss["sleeps"] == 5, "fentry attached but did not count"
    return True


@pytest.fixture(scope="module")
def kernel() -> dict[str, bool]:
    """What this kernel allows, by its own reports (not the probes under test)."""
    trampolines = _trampolines_work()
    return {"tracepoint": True, "kprobe": _in_kallsyms("register_kprobe"),  # CONFIG_KPROBES
            "fentry": trampolines, "fexit": trampolines,
            "lsm": trampolines and "bpf" in (F.active_lsms() or [])}


# --- what the host looks like, before and after -------------------------------------------

def _our_prog_ids() -> set[int]:
    """Ids of loaded programs named like the probes' programs."""
    return {p.id for p in inventory.programs() if p.name == F.PROG_NAME.decode()}


def _mounts() -> set[tuple[str, str]]:
    """Mount points and types, except other processes' netns pins under /run/netns."""
    with open("/proc/self/mounts") as f:
        points = {(p[1], p[2]) for p in (line.split() for line in f)}
    return {(m, fs) for m, fs in points
            if not (m.startswith("/run/netns/") and _foreign(os.path.basename(m)))}


def _netns_entries() -> set[str]:
    """Named network namespaces, except other processes' (other suites may run meanwhile;
    they put their pid in the name). The probes' own netns is anonymous."""
    names = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    return {n for n in names if not _foreign(n)}


def _foreign(name: str) -> bool:
    pids = [int(p) for p in name.replace("_", "-").split("-") if p.isdigit()]
    return bool(pids) and os.getpid() not in pids


def _netns_fds() -> list[str]:
    """Open fds of this process that hold a network namespace."""
    links = []
    for fd in glob.glob("/proc/self/fd/*"):
        try:
            links.append(os.readlink(fd))
        except OSError:
            pass
    return [link for link in links if link.startswith("net:[")]


def _probe_cgroups() -> list[str]:
    roots = [m for m, fs in _mounts() if fs == "cgroup2"]
    return [p for r in roots for p in glob.glob(os.path.join(r, F.CGROUP_PREFIX + "*"))]


def _thread_netns() -> set[str]:
    return {os.readlink(p) for p in glob.glob("/proc/self/task/*/ns/net")}


def _snapshot() -> dict:
    return {"progs": _our_prog_ids(), "mounts": _mounts(), "netns": _netns_entries(),
            "cgroups": _probe_cgroups(), "threads": threading.active_count(),
            "tmp": set(glob.glob(os.path.join(tempfile.gettempdir(), "ebpfkit-securityfs-*")))}


@pytest.fixture(scope="module")
def run():
    """probe_all() once, from a cold cache, with the host looked at before and after."""
    F.clear_cache()
    before = _snapshot()
    start = time.perf_counter()
    results = F.probe_all()
    elapsed = time.perf_counter() - start
    wait_for(lambda: not _our_prog_ids() - before["progs"], 3)  # links and programs are freed a little after close
    after = _snapshot()
    print("\nprobe_all() took %.3f s" % elapsed)
    for name, result in results.items():
        print(f"  {name:18} {result.status:12} {result.reason}")
    return {"results": results, "elapsed": elapsed, "before": before, "after": after}


# --- the host truth ---------------------------------------------------------------------

@pytest.mark.parametrize("name", SUPPORTED_HERE)
def test_supported_here(run, name):
    result = run["results"][name]
    assert result.status == F.SUPPORTED, str(result) + " " + result.detail


def test_kprobe_follows_kallsyms(run, kernel):
    result = run["results"]["kprobe"]
    if kernel["kprobe"]:
        assert result.status == F.SUPPORTED, str(result) + " " + result.detail
    else:
        assert result.status == F.UNSUPPORTED
        assert "CONFIG_KPROBES is off" in result.reason


@pytest.mark.parametrize("name", ["fentry", "fexit"])
def test_trampoline_hooks_follow_a_real_fentry_program(run, kernel, name):
    result = run["results"][name]
    if kernel[name]:
        assert result.status == F.SUPPORTED, str(result) + " " + result.detail
        return
    assert result.status == F.UNSUPPORTED
    assert result.errno in (1, 524), result  # EPERM: locked (the 6.18 here); ENOTSUPP: none
    if result.errno == 1:
        assert "EPERM" in result.reason and "trampolines" in result.reason


def test_lsm_follows_securityfs_and_trampolines(run, kernel):
    result = run["results"]["lsm"]
    if kernel["lsm"]:
        assert result.status == F.SUPPORTED, str(result) + " " + result.detail
        return
    assert result.status == F.UNSUPPORTED
    assert "EPERM" in result.reason or "bpf not in active LSMs" in result.reason
    assert "active LSMs" in result.detail or "active LSMs" in result.reason


def test_lsm_active_matches_securityfs(run):
    result = run["results"]["lsm_active"]
    lsms = F.active_lsms()
    assert lsms and "capability" in lsms
    assert result.supported == ("bpf" in lsms)
    assert ",".join(lsms) in result.reason


def test_lockdown_mode_read(run):
    result = F.lockdown_mode()
    assert result.value in ("none", "integrity", "confidentiality")
    assert result.supported == (result.value != "confidentiality")


def test_plain_facts():
    assert F.kernel_release() == os.uname().release
    assert F.libbpf_version().startswith("1.")
    assert F.clang_version().supported and F.clang_version().value.startswith("14.")
    assert F.btf_available().value == "/sys/kernel/btf/vmlinux"
    bcc = bcc_available()
    assert bcc.status in (F.SUPPORTED, F.UNSUPPORTED)
    if bcc.supported:
        assert os.path.exists(bcc.value)


def test_order_labels_and_statuses(run):
    results = run["results"]
    assert list(results) == F.names()
    for name, result in results.items():
        assert result.name == name and result.label
        assert result.status in (F.SUPPORTED, F.UNSUPPORTED, F.UNKNOWN)
        assert result.reason


def test_results_are_cached(run):
    assert F.probe("tracepoint") is F.probe("tracepoint")


def test_probe_all_is_fast(run):
    assert run["elapsed"] < 2.0


# --- choosing and requiring -------------------------------------------------------------

def test_best_hook(run, kernel):
    preference = ["fentry", "kprobe", "tracepoint"]
    assert F.best_hook(preference) == next(h for h in preference if kernel[h])
    assert F.best_hook(["fentry", "kprobe"]) == next((h for h in ("fentry", "kprobe") if kernel[h]), None)
    with pytest.raises(KeyError):
        F.best_hook(["no_such_hook"])


def test_require(run, kernel):
    if kernel["kprobe"]:
        assert F.require("kprobe").supported
    else:
        with pytest.raises(NotSupportedError) as info:
            F.require("kprobe")
        assert info.value.feature == "kprobe"
        assert "CONFIG_KPROBES" in str(info.value)
        assert "CONFIG_KPROBES=y" in info.value.hint and "tracepoint" in info.value.hint
    if kernel["fentry"]:
        assert F.require("fentry").supported
    else:
        with pytest.raises(NotSupportedError) as info:
            F.require("fentry")
        assert info.value.hint
    assert F.require("tracepoint").supported


# --- program, map and helper types ------------------------------------------------------

def test_program_and_map_types(kernel):
    assert F.have_program_type(ProgType.XDP).supported
    assert F.have_program_type(ProgType.TRACING).supported  # tp_btf loads here
    # an LSM program loads where trampolines work (BPF-LSM active or not); EPERM on the 6.18 here
    lsm_type = F.have_program_type(ProgType.LSM)
    assert lsm_type.status == (F.SUPPORTED if kernel["fentry"] else F.UNSUPPORTED), lsm_type
    assert F.have_map_type(MapType.SOCKHASH).supported
    assert F.have_map_type(MapType.RINGBUF).supported


def test_helpers():
    assert F.have_helper(ProgType.KPROBE, 14).supported  # get_current_pid_tgid
    assert F.have_helper(ProgType.XDP, 1).supported  # map_lookup_elem (dummy args refused)
    assert F.have_helper(ProgType.SCHED_CLS, 51).status == F.UNSUPPORTED  # redirect_map: XDP only
    assert F.have_helper(ProgType.XDP, 99999).status == F.UNSUPPORTED


# --- nothing left behind ----------------------------------------------------------------

def test_no_programs_left(run):
    assert not run["after"]["progs"] - run["before"]["progs"]


def test_no_netns_left(run):
    assert run["after"]["netns"] <= run["before"]["netns"]
    assert _thread_netns() == {os.readlink("/proc/self/ns/net")}
    assert _netns_fds() == []
    assert run["after"]["threads"] == run["before"]["threads"]


def test_no_cgroup_left(run):
    assert run["after"]["cgroups"] == []


def test_only_tracefs_or_bpffs_mounted(run):
    added = run["after"]["mounts"] - run["before"]["mounts"]
    assert all(fstype in ("tracefs", "bpf") for _, fstype in added), added
    assert not any(fstype == "securityfs" for _, fstype in run["after"]["mounts"]
                   if (_, fstype) not in run["before"]["mounts"])
    assert run["after"]["tmp"] <= run["before"]["tmp"]


# --- the result rule without root -------------------------------------------------------

def test_without_root_everything_needing_it_is_unknown(monkeypatch):
    monkeypatch.setattr(F, "_is_root", lambda: False)
    F.clear_cache()
    try:
        for name in ["tracepoint", "kprobe", "fentry", "xdp_native", "sockops", "prog_test_run"]:
            result = F.probe(name)
            assert (result.status, result.reason) == (F.UNKNOWN, "needs root"), result
        assert F.have_program_type(ProgType.XDP).status == F.UNKNOWN
        if not any(fs == "securityfs" for _, fs in _mounts()):
            assert F.lockdown_mode().status == F.UNKNOWN
            assert "needs root" in F.lockdown_mode().reason
        assert F.best_hook(["fentry", "kprobe", "tracepoint"]) is None
        with pytest.raises(PermissionDeniedError):
            F.require("kprobe")
    finally:
        monkeypatch.undo()
        F.clear_cache()


def test_type_walk_says_whether_the_c_module_was_built(monkeypatch):
    import importlib.util
    import sys

    built = importlib.util.find_spec("ebpfkit.engine._btfnames") is not None
    F.clear_cache()
    assert F.probe("type_walk").supported == built
    import ebpfkit.engine

    monkeypatch.setitem(sys.modules, "ebpfkit.engine._btfnames", None)  # as if not built
    monkeypatch.delattr(ebpfkit.engine, "_btfnames", raising=False)
    F.clear_cache()
    try:
        with pytest.raises(NotSupportedError, match="not built at install") as exc:
            F.require("type_walk")
        assert "python3-dev" in str(exc.value.hint)
    finally:
        F.clear_cache()


def test_kernel_function_arity():
    # vfs_read(file, buf, count, pos) and vfs_write(file, buf, count, pos): unchanged for years
    assert F.kernel_function_arity("vfs_read") == 4 == F.kernel_function_arity("vfs_write")
    assert F.kernel_function_arity("ebpfkit_no_such_function") is None
    # the BPF-LSM target of inode_setattr: (dentry, attr), and the mount's idmap first from 6.12
    assert F.kernel_function_arity("bpf_lsm_inode_setattr") in (2, 3)

"""Inside a VM kernel with BPF-LSM active (one boot for the whole module): the harness gives
the kernel and options asked for, and the engine's hooks this host's kernel refuses
(fentry, BPF-LSM, kprobes) load, attach through each attach path, and really run.

One C source holds every program; each test opens it (a cache hit after the first compile)
and loads only the programs it needs."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import ebpfkit
from ebpfkit.vm import find_kernels, in_vm
from ebpfkit.vm.kernels import default_kernel

pytestmark = pytest.mark.vm(lsm=True)

SOURCE = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

const volatile int targ_tgid = 0;
const volatile u64 deny_ino = 0;
u64 fentry_hits = 0, kprobe_hits = 0, lsm_opens = 0, lsm_denied = 0;

static __always_inline bool ours(void)
{
    return (bpf_get_current_pid_tgid() >> 32) == targ_tgid;
}

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(on_sleep_fentry)
{
    if (ours())
        __sync_fetch_and_add(&fentry_hits, 1);
    return 0;
}

SEC("kprobe/hrtimer_nanosleep")
int BPF_KPROBE(on_sleep_kprobe)
{
    if (ours())
        __sync_fetch_and_add(&kprobe_hits, 1);
    return 0;
}

SEC("lsm/file_open")
int BPF_PROG(on_file_open, struct file *file, int ret)
{
    if (ret || !ours())
        return ret;
    __sync_fetch_and_add(&lsm_opens, 1);
    if (deny_ino && BPF_CORE_READ(file, f_inode, i_ino) == deny_ino) {
        __sync_fetch_and_add(&lsm_denied, 1);
        return -1; /* -EPERM */
    }
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""
PROGRAMS = ("on_sleep_fentry", "on_sleep_kprobe", "on_file_open")
SLEEPS = 25


def load(*wanted: str, **config):
    """Compile (cached) and load only the ``wanted`` programs, configured for this process."""
    spec = ebpfkit.compile(text=SOURCE, name="vm_hooks.bpf.c")
    for name in PROGRAMS:
        spec.programs[name].autoload = name in wanted
    return spec.load({"targ_tgid": os.getpid(), **config})


def sleep_n(n: int) -> None:
    for _ in range(n):
        time.sleep(0.0001)  # one clock_nanosleep -> one hrtimer_nanosleep() each


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Compile once up front and say what it cost under emulation, reusing the host's
    vmlinux.h and precompiled header through the shared cache (shown with -s)."""
    started = time.monotonic()
    ebpfkit.compile(text=SOURCE, name="vm_hooks.bpf.c").close()
    print(f"\nguest compile of vm_hooks.bpf.c: {time.monotonic() - started:.2f} s")


def test_runs_in_the_requested_guest_kernel():
    assert in_vm()
    release = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=True).stdout.strip()
    # the release the host resolved and booted (the default kernel unless --vm-kernel)
    assert release == os.environ.get("EBPFKIT_VM_KERNEL", default_kernel(find_kernels()).release)
    assert os.geteuid() == 0


def test_bpf_lsm_is_active():
    with open("/sys/kernel/security/lsm") as f:
        lsms = f.read().strip().split(",")
    assert "bpf" in lsms, lsms
    from ebpfkit.engine import features

    for name in ("fentry", "kprobe", "lsm"):
        probe = features.probe(name)
        assert probe.supported, f"{name}: {probe.reason}"


def test_fentry_attach_trace_counts_calls():
    with load("on_sleep_fentry") as obj:
        link = obj.programs["on_sleep_fentry"].attach_trace()
        assert link.fd >= 0
        sleep_n(SLEEPS)
        assert obj.bss["fentry_hits"] == SLEEPS


def test_kprobe_attach_kprobe_counts_calls():
    with load("on_sleep_kprobe") as obj:
        obj.programs["on_sleep_kprobe"].attach_kprobe("hrtimer_nanosleep")
        sleep_n(SLEEPS)
        assert obj.bss["kprobe_hits"] == SLEEPS


def test_lsm_file_open_attach_lsm_denies_one_file(tmp_path):
    target, other = tmp_path / "denied", tmp_path / "allowed"
    target.write_text("secret")
    other.write_text("fine")
    with load("on_file_open", deny_ino=os.stat(target).st_ino) as obj:
        obj.programs["on_file_open"].attach_lsm()
        with pytest.raises(PermissionError):
            open(target).close()
        assert other.read_text() == "fine"
        assert obj.bss["lsm_denied"] == 1
        assert obj.bss["lsm_opens"] >= 2
    assert target.read_text() == "secret"  # detached with the object: allowed again


def test_auto_attach_of_every_hook_kind():
    with load(*PROGRAMS) as obj:
        links = obj.attach()
        assert len(links) == 3
        sleep_n(SLEEPS)
        open("/proc/self/stat").close()
        assert obj.bss["fentry_hits"] == SLEEPS
        assert obj.bss["kprobe_hits"] == SLEEPS
        assert obj.bss["lsm_opens"] >= 1

"""`--btf FILE` on this host: a program compiled and relocated against a file (here a
vmlinux-style ELF carrying this kernel's BTF) counts what the test does; doctor reports the
file; and, with the kernel's own BTF hidden in a private mount namespace (the host's stays
as it is), a tool exits 3 naming --btf, or works from the file where its hooks need only CO-RE.
The whole picture, every tool, is tests/vm/test_btf_vm.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import ebpfkit
from ebpfkit.engine.btf import KERNEL_BTF

pytestmark = pytest.mark.integration

OPENS = 37

COUNTER = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

const volatile u32 targ_tgid = 0;
u64 opens = 0;

SEC("tp/syscalls/sys_enter_openat")
int count_openat(struct trace_event_raw_sys_enter *ctx)
{
    /* ctx->args: a CO-RE field relocation, so loading needs BTF from somewhere. args[1] is
     * openat's filename, never NULL here. (Not ctx->id: in a per-syscall tracepoint's record
     * that slot is a 4-byte __syscall_nr and padding, which 6.18 leaves unzeroed.) */
    if ((bpf_get_current_pid_tgid() >> 32) == targ_tgid && ctx->args[1])
        __sync_fetch_and_add(&opens, 1);
    return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def ebpfkit_cli(*args: str, prefix=()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EBPFKIT_BTF"}
    return subprocess.run([*prefix, sys.executable, "-m", "ebpfkit", *args], capture_output=True, text=True,
                          timeout=120, env=dict(env, NO_COLOR="1"))


def hidden_kernel_btf(tmp_path) -> list[str]:
    """A command prefix running its command with an empty file bind-mounted over the kernel's
    BTF, in a private mount namespace: the host's stays visible to everyone else."""
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind "{empty}" {KERNEL_BTF} && exec "$@"', "hide"]


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A compile cache of the test's own: nothing compiled against the kernel's BTF is reused."""
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def saved_btf(tmp_path):
    path = tmp_path / "vmlinux.btf"
    shutil.copyfile(KERNEL_BTF, path)
    return path


def test_program_relocated_against_a_vmlinux_elf_counts_the_tests_opens(tmp_path, private_cache, saved_btf):
    banner = tmp_path / "banner"
    banner.write_bytes(f"Linux version {os.uname().release} (test) #1\n".encode())
    vmlinux = tmp_path / "vmlinux"
    subprocess.run(["objcopy", "--add-section", f".BTF={saved_btf}", "--add-section", f".banner={banner}",
                    os.path.realpath(sys.executable), str(vmlinux)], check=True)
    spec = ebpfkit.compile(text=COUNTER, name="btf_opens.bpf.c", btf=str(vmlinux))
    spec.rodata["targ_tgid"] = os.getpid()
    with spec.load() as obj:
        obj.attach()
        for _ in range(OPENS):
            os.close(os.open("/etc/hostname", os.O_RDONLY))
        assert obj.bss["opens"] == OPENS
    from ebpfkit.engine import cache

    index = cache.read_record(str(private_cache / "btf" / "index.rec"))
    assert list(index) and all(k.startswith(f"{vmlinux}|") for k in index), index


def test_hidden_kernel_btf_a_compiled_object_relocates_against_ebpfkit_btf(tmp_path, private_cache, saved_btf):
    obj_path = ebpfkit.compile(text=COUNTER, name="btf_reloc.bpf.c").path
    load = ("import ebpfkit\n"
            "try:\n"
            f"    ebpfkit.load({obj_path!r}).close()\n"
            "    print('loaded')\n"
            "except ebpfkit.NotSupportedError as exc:\n"
            "    print(exc.feature, exc)\n")
    hide = hidden_kernel_btf(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "EBPFKIT_BTF"}
    without = subprocess.run([*hide, sys.executable, "-c", load], capture_output=True, text=True, env=env)
    assert without.stdout.startswith("btf ") and "CO-RE relocation needs this kernel's BTF" in without.stdout, \
        without.stdout + without.stderr
    with_file = subprocess.run([*hide, sys.executable, "-c", load], capture_output=True, text=True,
                               env=dict(env, EBPFKIT_BTF=str(saved_btf)))
    assert with_file.stdout == "loaded\n", with_file.stdout + with_file.stderr


def test_doctor_reports_the_file_and_the_kernels_own(saved_btf):
    result = ebpfkit_cli("--btf", str(saved_btf), "--format", "json", "doctor")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["btf"] == {"path": str(saved_btf), "source": "--btf", "kernel_btf": True,
                             "needs_kernel_btf": ["tp_btf", "fentry", "fexit", "fmod_ret", "lsm", "struct_ops",
                                                  "iter"]}
    assert str(saved_btf) in report["features"]["btf"]["reason"]
    assert report["features"]["kernel_btf"]["value"] == KERNEL_BTF
    assert report["tools"]["runqlat"]["hook"].startswith("tp_btf")  # the kernel's own BTF is there

    plain = json.loads(ebpfkit_cli("--format", "json", "doctor").stdout)
    assert plain["btf"]["source"] == "kernel" and plain["btf"]["path"] == KERNEL_BTF


def test_hidden_kernel_btf_exit_3_without_the_file_raw_tracepoints_with_it(tmp_path, private_cache, saved_btf):
    hide = hidden_kernel_btf(tmp_path)
    without = ebpfkit_cli("runqlat", "1", "1", prefix=hide)
    assert without.returncode == 3, without.stderr
    assert "--btf FILE" in without.stderr and "btfhub" in without.stderr and "Traceback" not in without.stderr

    with_file = ebpfkit_cli("-v", "--btf", str(saved_btf), "--format", "json", "runqlat", "0.5", "1", prefix=hide)
    assert with_file.returncode == 0, with_file.stderr
    assert "hook: raw tracepoint sched_switch" in with_file.stderr
    assert json.loads(with_file.stdout)["histograms"][0]["total"] > 0  # this host always schedules
    assert os.stat(KERNEL_BTF).st_size > 0

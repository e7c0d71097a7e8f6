"""detect's rules on privilege, injection, kernel and fileless events, against the real kernel:
each rule raises one alert for a call this test makes (attempts the kernel refuses included:
the call is what is watched), naming its process; the same calls by the programs a rule
trusts raise none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from helpers import alerts_within
from ebpfkit.tools import detect

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

NOBODY = 65534
PYTHON = "/usr/bin/python3"   # readable by nobody (the venv's may not be)
FINIT_MODULE_X86_64 = 313


@pytest.fixture(scope="module")
def session():
    with detect.open() as s:
        yield s


def test_a_non_root_process_asking_for_root(session):
    asks = subprocess.run([PYTHON, "-c", "import os\ntry: os.setresuid(-1, 0, -1)\nexcept PermissionError: pass"],
                          user=NOBODY, timeout=30)
    alerts = alerts_within(session, 1.0, "Non-root process asks for root")
    assert asks.returncode == 0
    assert [(a.event["evt.type"], a.event["evt.arg.uid"], a.event["user.uid"]) for a in alerts] == [
        ("setresuid", 0, NOBODY)]
    root_drops = subprocess.run([PYTHON, "-c", "import os; os.setuid(0)"], timeout=30)  # root: no escalation
    assert root_drops.returncode == 0 and alerts_within(session, 0.5, "Non-root process asks for root") == []


def test_ptrace_attach_names_the_target(session):
    target = subprocess.Popen(["sleep", "30"])
    try:
        attach = subprocess.run([sys.executable, "-c", f"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.ptrace(16, {target.pid}, None, None) == 0, ctypes.get_errno()  # PTRACE_ATTACH
os.waitpid({target.pid}, 0)
libc.ptrace(17, {target.pid}, None, None)  # PTRACE_DETACH
"""], timeout=30)
        alerts = alerts_within(session, 1.0, "Ptrace attach or injection")
    finally:
        target.kill()
        target.wait()
    assert attach.returncode == 0
    assert [(a.event["evt.arg.request"], a.event["evt.arg.pid"], a.pid) for a in alerts] == [
        ("PTRACE_ATTACH", target.pid, alerts[0].pid)]
    assert alerts[0].pid != target.pid


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="finit_module by its x86_64 number")
def test_a_module_load_outside_the_module_tools(session):
    """Where the kernel has modules (the VM test runs this too); without, the session says the
    calls are not watched."""
    from ebpfkit.engine import features

    if not features.have_tracepoint("syscalls", "sys_enter_finit_module"):
        assert "no tracepoint here for init_module, finit_module: not watched" in session.hook
        assert session.missing == ["init_module", "finit_module"]
        return
    assert session.missing == []
    assert_module_load_alert(session)


def assert_module_load_alert(session):
    # an fd that is no module: the kernel refuses it (EBADF), after the call was made
    load = subprocess.run([sys.executable, "-c", "import ctypes; "
                           f"print(ctypes.CDLL(None, use_errno=True).syscall({FINIT_MODULE_X86_64}, -1, b'', 0))"],
                          capture_output=True, text=True, timeout=30)
    alerts = alerts_within(session, 1.0, "Kernel module loaded directly")
    assert load.stdout.strip() == "-1"
    assert [(a.event["evt.type"], a.event["proc.name"]) for a in alerts] == [("finit_module", "python")]


def test_a_bpf_program_loaded_by_an_unknown_process(session, tmp_path):
    loader = subprocess.run([sys.executable, "-c", """
from ebpfkit.engine import compile
obj = compile(text=b'#include "vmlinux.h"\\n#include <bpf/bpf_helpers.h>\\n'
                   b'SEC("tp/syscalls/sys_enter_getppid") int probe(void *ctx) { return 0; }\\n'
                   b'char LICENSE[] SEC("license") = "GPL";\\n').load()
obj.close()
"""], capture_output=True, text=True, timeout=120)
    assert loader.returncode == 0, loader.stderr
    alerts = alerts_within(session, 1.0, "BPF program loaded")
    assert [(a.event["evt.arg.cmd"], a.event["proc.name"]) for a in alerts] == [("BPF_PROG_LOAD", "python")]
    assert len(alerts[0].signals) >= 1 and set(alerts[0].signals) == {"bpf"}  # its loads, fused


def test_fileless_execution_from_a_memfd(session):
    run = subprocess.run([sys.executable, "-c", """
import os
fd = os.memfd_create("payload")
with open("/bin/true", "rb") as f:
    os.write(fd, f.read())
os.execv(f"/proc/self/fd/{fd}", ["payload"])
"""], timeout=30)
    alerts = alerts_within(session, 1.0, "Fileless execution")
    assert run.returncode == 0
    assert len(alerts) == 1 and alerts[0].event["proc.is_exe_from_memfd"] == "true"
    assert alerts[0].event["proc.exepath"].startswith("/proc/self/fd/")
    # an ordinary program, and one whose file was removed after it started, are not fileless
    plain = subprocess.run(["/bin/true"], timeout=30)
    assert plain.returncode == 0 and alerts_within(session, 0.5, "Fileless execution") == []


def test_sigkill_of_the_target_does_not_matter_to_the_alert(session):
    """The ptrace alert is made from the attach, not from the target's later life."""
    target = subprocess.Popen(["sleep", "30"])
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL(None).ptrace(0x4206, {target.pid}, 0, 0)"],
                   timeout=30)  # PTRACE_SEIZE
    target.send_signal(signal.SIGKILL)
    target.wait()
    alerts = alerts_within(session, 1.0, "Ptrace attach or injection")
    assert [a.event["evt.arg.request"] for a in alerts] == ["PTRACE_SEIZE"]


def test_a_kernel_interface_filesystem_mounted(session, tmp_path):
    """debugfs mounted in a mount namespace of its own (gone with the command): the call is
    mount(2) or, with a newer util-linux, fsopen(2)."""
    target = tmp_path / "mnt"
    target.mkdir()
    mounted = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "debugfs", "none",
                              str(target)], capture_output=True, text=True, timeout=30)
    alerts = alerts_within(session, 1.0, "Kernel interface filesystem mounted")
    assert mounted.returncode == 0, mounted.stderr
    assert [(a.event["evt.type"], a.event["evt.arg.fstype"], a.event["proc.name"]) for a in alerts] in (
        [("mount", "debugfs", "mount")], [("fsopen", "debugfs", "mount")])
    if alerts[0].event["evt.type"] == "mount":
        assert alerts[0].event["evt.arg.target"] == str(target) and alerts[0].event["evt.arg.source"] == "none"
    tmpfs = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "none",
                            str(target)], capture_output=True, timeout=30)
    assert tmpfs.returncode == 0 and alerts_within(session, 0.5, "Kernel interface filesystem mounted") == []

"""BCC programs and tools where the host kernel cannot run them: kprobes (absent on the host),
in the 6.1 VM, which also has that kernel's headers, so BCC itself runs there for comparison
(``engine="bcc"``). The ground truth: opens the test makes with a flag nobody else passes,
some of a file that exists, some of one that does not."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from ebpfkit.bcc import BPF

pytestmark = pytest.mark.vm(kernel=["6.1"], lsm=True, timeout=2700)  # the 6.1 group's boot

# One program, three hooks on the same function, so each engine compiles once: kprobe__
# functions attach by their name, the probed function's arguments are named as in the kernel
# and `how->flags` reads through a kernel pointer, as BCC's rewriter lets it; KRETFUNC_PROBE's
# typed arguments and return value see the same opens by fexit.
OPENS = r"""
#include <linux/fs.h>

BPF_ARRAY(counts, u64, 4);  /* kprobe: entered, returned a descriptor; fexit: the same two */
BPF_HASH(inflight, u32, u8);

int kprobe__do_sys_openat2(struct pt_regs *ctx, int dfd, const char __user *filename, struct open_how *how)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != TARGET_PID || !(how->flags & O_NOCTTY))
        return 0;
    u32 tid = id;
    u8 one = 1;
    inflight.update(&tid, &one);
    counts.atomic_increment(0);
    return 0;
}

int kretprobe__do_sys_openat2(struct pt_regs *ctx)
{
    u32 tid = bpf_get_current_pid_tgid();
    if (!inflight.lookup(&tid))
        return 0;
    inflight.delete(&tid);
    if ((long)PT_REGS_RC(ctx) >= 0)
        counts.atomic_increment(1);
    return 0;
}

KRETFUNC_PROBE(do_sys_openat2, int dfd, const char __user *filename, struct open_how *how, long ret)
{
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID || !(how->flags & O_NOCTTY))
        return 0;
    counts.atomic_increment(2);
    if (ret >= 0)
        counts.atomic_increment(3);
    return 0;
}
"""
OPENED, MISSED = 17, 3


def open_marked(directory) -> None:
    present = directory / "present"
    present.write_text("x")
    for _ in range(OPENED):
        os.close(os.open(present, os.O_RDONLY | os.O_NOCTTY))
    for _ in range(MISSED):
        with pytest.raises(FileNotFoundError):
            os.open(directory / "absent", os.O_RDONLY | os.O_NOCTTY)


@pytest.mark.parametrize("engine", ["ebpfkit", "bcc"])
def test_kprobes_and_a_kretfunc_probe_count_exactly_the_opens_made(engine, tmp_path):
    with BPF(text=OPENS, cflags=[f"-DTARGET_PID={os.getpid()}"], engine=engine) as b:
        assert b.num_open_kprobes() == 2
        open_marked(tmp_path)
        counts = [b["counts"][i].value for i in range(4)]
    assert counts == [OPENED + MISSED, OPENED] * 2


def run_tool_while(argv: list, header: str, act) -> tuple[list[str], str]:
    """``ebpfkit bcc run ARGV``: once its header is out (a compile under emulation first), ``act()``,
    then Ctrl-C; its output lines and its stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "bcc", "run", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        end = time.monotonic() + 240
        while not any(header in line for line in lines) and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.5)
        assert any(header in line for line in lines), (lines, proc.poll())
        time.sleep(1.0)  # its perf buffer is opened after the header (BCC's order too)
        act()
        time.sleep(2.0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        reader.join(timeout=10)
    return lines, err


def test_bccs_capable_shows_the_capability_a_process_checks():
    """capable (a kprobe on cap_capable): a child lowering its nice value is checked for
    CAP_SYS_NICE (23), audited; capable reads cap_opt's bits since 5.1 (CAP_OPT_NONE defined)."""
    def act():
        subprocess.run([sys.executable, "-c", "import os; os.setpriority(os.PRIO_PROCESS, 0, -3)"], check=True)

    lines, err = run_tool_while(["capable"], "CAP", act)
    nice = [line for line in lines if re.search(r"\b23\s+CAP_SYS_NICE\s+1\b", line)]
    assert nice, "".join(lines[-40:]) + err


def test_bccs_opensnoop_shows_the_file_a_process_opens(tmp_path):
    """BCC's own opensnoop, unmodified: on 6.1 it takes its kfunc path (fexit on the syscalls'
    wrappers, reading their pt_regs under CONFIG_ARCH_HAS_SYSCALL_WRAPPER)."""
    marked = tmp_path / f"ekvm{os.getpid()}.dat"
    marked.write_text("x")

    def act():
        for _ in range(3):
            marked.read_text()

    lines, err = run_tool_while(["opensnoop"], "PATH", act)
    seen = [line for line in lines if str(marked) in line]
    assert len(seen) >= 3 and all(f" {os.getpid()} " in f" {line} " for line in seen), "".join(lines[-40:]) + err


# --- the engine-neutral protocols: ebpfkit's reading, either engine's program ------------------

@pytest.mark.parametrize("engine", ["ebpfkit", "bcc"])
def test_neutral_tables_and_streams_show_exactly_the_opens_made(engine, tmp_path):
    from bcc_neutral import check_either_engine

    check_either_engine(engine, tmp_path)


def test_softirqs_on_bccs_engine_counts_net_rx_as_proc_softirqs(veth_pair):
    """ebpfkit's softirqs with engine="bcc": its BCC-dialect program compiled by BCC against
    6.1's headers, its map read through the neutral Table; NET_RX on the sending CPU against
    the kernel's own count (tests/integration/tools/softirqs has the reasoning)."""
    from irqs import CPU, UdpReceiver, proc_softirqs, send_udp

    from ebpfkit.tools import softirqs

    receiver = UdpReceiver(veth_pair)
    try:
        send_udp(veth_pair, 5)  # neighbour resolution first
        time.sleep(0.2)
        receiver.drain()
        with softirqs.open(per_cpu=True, engine="bcc") as session:
            assert session.hook == softirqs.session.BCC_HOOK
            session.sample()
            before = proc_softirqs()
            send_udp(veth_pair, 300)
            time.sleep(0.5)
            after = proc_softirqs()
            stats = session.sample()
        assert receiver.drain() == 300
    finally:
        receiver.close()
    counted = sum(s.count for s in stats if s.name == "NET_RX" and s.cpu == CPU)
    truth = after[CPU] - before[CPU]
    assert truth >= 150 and abs(counted - truth) <= max(5, truth // 10), (counted, truth)
    assert all(s.total_ns > 0 for s in stats if s.name == "NET_RX")


def test_hardirqs_on_bccs_engine_counts_what_proc_interrupts_counts():
    """ebpfkit's hardirqs with engine="bcc": reads of files on the guest's 9p root raise the
    virtio transport's interrupts; each busy IRQ's count and handler name against
    /proc/interrupts over the same interval."""
    from irqs import interrupts

    from ebpfkit.tools import hardirqs

    files = [os.path.join(root, name) for root, _, names in os.walk("/usr/share/doc") for name in names][:400]
    with hardirqs.open(engine="bcc", dist=True) as session:
        assert session.hook == hardirqs.session.BCC_HOOK
        session.sample()
        before = interrupts()
        for path in files:
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.read()
        after = interrupts()
        stats = session.sample()
    truth = {irq: after[irq][1] - before[irq][1] for irq in after if irq in before}
    busy = {irq: n for irq, n in truth.items() if n >= 50}
    assert busy, f"the reads raised few interrupts: {truth}"
    counted: dict[int, int] = {}
    for s in stats:
        counted[s.irq] = counted.get(s.irq, 0) + s.count
        assert s.histogram.total == s.count
    for irq, n in busy.items():
        assert abs(counted.get(irq, 0) - n) <= max(5, n // 10), (irq, after[irq][0], counted.get(irq), n)
        assert after[irq][0] in {s.name for s in stats if s.irq == irq}


def test_kernel_facts_are_the_running_kernels_not_those_it_compiles_against():
    """The guest compiles against the host's BTF (EBPFKIT_COMPILE_BTF, for the host's cache),
    but a script asking about the kernel gets 6.1's answer: renamedata's first member is
    old_mnt_userns there (mnt_idmap since 6.3), which filelife picks its probes' arguments by."""
    from ebpfkit.engine import kernel_struct_members

    assert os.environ.get("EBPFKIT_COMPILE_BTF"), "the harness was expected to share the host's BTF"
    assert kernel_struct_members("renamedata")[0] == "old_mnt_userns"
    assert BPF.kernel_struct_has_field(b"renamedata", b"old_mnt_userns")


def test_bccs_filelife_shows_a_file_created_and_removed(tmp_path):
    """filelife: kprobes on vfs_create/vfs_open/security_inode_create and vfs_unlink, whose
    arguments it reads by the kernel's renamedata (6.1: a user namespace first)."""
    marked = tmp_path / f"ekfl{os.getpid()}"

    def act():
        for _ in range(3):
            marked.write_text("x")
            time.sleep(0.2)
            marked.unlink()

    lines, err = run_tool_while(["filelife"], "FILE", act)
    seen = [line for line in lines if line.rstrip().endswith(marked.name)]
    assert len(seen) >= 3 and all(f" {os.getpid()} " in f" {line} " for line in seen), "".join(lines[-40:]) + err

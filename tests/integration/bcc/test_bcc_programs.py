"""BCC-dialect programs, written as BCC's users write them, run by ebpfkit.bcc.BPF on this
host's kernel (no kernel headers: BTF only) and checked against what the test did: files
opened with a mode nobody else uses, writes of known sizes to one fd."""

from __future__ import annotations

import os
import re
import threading

import pytest

from ebpfkit.bcc import BPF
from ebpfkit.errors import CompileError, EbpfkitError, MapError, NotSupportedError

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs")]

OPENS = r"""
#include <linux/sched.h>

struct open_t {
    u32 pid;
    u32 ppid;
    char comm[TASK_COMM_LEN];
    char path[96];
};

BPF_HASH(opens, u32, u64);
BPF_TABLE("percpu_array", int, u64, calls, 1);
BPF_PERF_OUTPUT(events);
BPF_RINGBUF_OUTPUT(ring, 16);

TRACEPOINT_PROBE(syscalls, sys_enter_openat) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    if (pid != TARGET_PID || args->mode != 0751)
        return 0;
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    struct open_t e = {};
    e.pid = pid;
    e.ppid = task->real_parent->tgid;   /* BCC reads kernel pointers implicitly */
    bpf_get_current_comm(&e.comm, sizeof(e.comm));
    bpf_probe_read_user_str(&e.path, sizeof(e.path), args->filename);
    opens.increment(pid);
    calls.increment(0);
    events.perf_submit(args, &e, sizeof(e));
    ring.ringbuf_output(&e, sizeof(e), 0);
    return 0;
}
"""

WRITES = r"""
BPF_HISTOGRAM(sizes);
BPF_ARRAY(total, u64, 1);

int on_write(struct tracepoint__syscalls__sys_enter_write *args) {
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID || args->fd != TARGET_FD)
        return 0;
    sizes.increment(bpf_log2l(args->count));
    int zero = 0;
    u64 *sum = total.lookup(&zero);
    if (sum)
        __sync_fetch_and_add(sum, args->count);
    return 0;
}
"""


def bpf_fds() -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("anon_inode:bpf")
               for fd in os.listdir("/proc/self/fd") if _link(fd))


def _link(fd: str) -> bool:
    try:
        os.readlink(f"/proc/self/fd/{fd}")
        return True
    except OSError:
        return False


def test_a_tracepoint_probe_counts_and_reports_each_open_through_every_output(tmp_path):
    before = bpf_fds()
    path = tmp_path / "opened-by-the-test"
    perf, ring, cpus = [], [], []
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    with BPF(text=OPENS, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        b["events"].open_perf_buffer(lambda cpu, data, size: (cpus.append(cpu), perf.append(b["events"].event(data))))
        b["ring"].open_ring_buffer(lambda ctx, data, size: ring.append(b["ring"].event(data)))
        os.sched_setaffinity(0, {cpu})  # every open on one CPU: the perf callback names it
        try:
            for _ in range(7):
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o751))
        finally:
            os.sched_setaffinity(0, allowed)
        os.close(os.open(path, os.O_WRONLY))  # another mode: not counted
        b.perf_buffer_poll(200)
        b.ring_buffer_poll(200)
        assert b["opens"][os.getpid()].value == 7
        assert [k.value for k in b["opens"]] == [os.getpid()]
        assert b["calls"].sum(0).value == 7 and len(b["calls"][0]) == os.cpu_count()
        comm = open("/proc/self/comm", "rb").read().strip()
        assert cpus == [cpu] * 7
        for events in (perf, ring):
            assert [(e.pid, e.ppid, e.comm, e.path) for e in events] == \
                [(os.getpid(), os.getppid(), comm, str(path).encode())] * 7
    assert bpf_fds() == before, "cleanup() left BPF objects open"


def test_an_explicitly_attached_function_fills_a_log2_histogram_until_detached(tmp_path, capsys):
    with open(tmp_path / "out", "wb", buffering=0) as f, \
            BPF(text=WRITES, cflags=[f"-DTARGET_PID={os.getpid()}", f"-DTARGET_FD={f.fileno()}"]) as b:
        b.attach_tracepoint(tp="syscalls:sys_enter_write", fn_name="on_write")
        for size, times in ((1, 3), (100, 2), (5000, 1)):
            for _ in range(times):
                f.write(b"x" * size)
        b.detach_tracepoint(tp="syscalls:sys_enter_write")
        f.write(b"y" * 100)  # detached: not seen
        assert b["total"][0].value == 3 + 200 + 5000
        counts = {k.value: v.value for k, v in b["sizes"].items() if v.value}
        assert counts == {1: 3, 7: 2, 13: 1}  # bpf_log2l: 1 + floor(log2(size))
        b["sizes"].print_log2_hist("bytes")
    rows = {m[0]: int(m[1]) for m in re.findall(r"(\d+ -> \d+)\s*: (\d+)", capsys.readouterr().out)}
    assert rows["0 -> 1"] == 3 and rows["64 -> 127"] == 2 and rows["4096 -> 8191"] == 1
    assert sum(rows.values()) == 6


def test_errors_name_the_programs_line_the_missing_tracepoint_and_the_missing_hook():
    with pytest.raises(CompileError) as exc:
        BPF(text="BPF_HASH(counts);\nint f(void *ctx) {\n    return undeclared + 1;\n}\n")
    assert re.search(r"bcc_\w+\.c:3:\d+: error: use of undeclared identifier 'undeclared'", str(exc.value)), \
        str(exc.value)
    with pytest.raises(NotSupportedError) as exc:
        BPF(text="TRACEPOINT_PROBE(sched, no_such_event) { return 0; }")
    assert "no tracepoint sched:no_such_event" in str(exc.value)
    from ebpfkit.engine import features

    if not features.probe("kprobe").supported:  # this host: a clear error, nothing left loaded
        before = bpf_fds()
        with pytest.raises(NotSupportedError) as exc:
            BPF(text="int kprobe__vfs_read(struct pt_regs *ctx) { return 0; }")
        assert "kprobe__vfs_read: this kernel has no kprobes" in str(exc.value) and exc.value.exit_code == 3
        assert bpf_fds() == before, "a failed attach left BPF objects open"


UPROBE_AND_STACKS = r"""
BPF_HASH(calls, u32, u64);
BPF_STACK_TRACE(stacks, 64);
BPF_HASH(stack_of, u32, int);

int on_getppid(struct pt_regs *ctx) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    if (pid != TARGET_PID)
        return 0;
    calls.increment(pid);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    if (pid != TARGET_PID)
        return 0;
    int id = stacks.get_stackid(args, 0);
    stack_of.update(&pid, &id);
    return 0;
}
"""


def test_a_uprobe_on_libc_counts_calls_and_a_kernel_stack_walks_to_named_functions():
    with BPF(text=UPROBE_AND_STACKS, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        b.attach_uprobe(name="c", sym="getppid", fn_name="on_getppid")
        assert b.num_open_uprobes() == 1 and b.num_open_tracepoints() == 1
        for _ in range(123):
            os.getppid()
        assert b["calls"][os.getpid()].value == 123
        stack_id = b["stack_of"][os.getpid()].value
        assert stack_id >= 0
        frames = [b.ksym(addr) for addr in b["stacks"].walk(stack_id)]
        assert frames and all(f != b"[unknown]" for f in frames), frames
        assert any(b"syscall" in f for f in frames), frames  # the syscall entry path
        b.detach_uprobe(name="c", sym="getppid")
        os.getppid()
        assert b["calls"][os.getpid()].value == 123


PER_FD_HIST = r"""
typedef struct { u32 fd; u64 slot; } fd_slot_t;
BPF_HISTOGRAM(sizes, fd_slot_t);

TRACEPOINT_PROBE(syscalls, sys_enter_write) {
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID || (args->fd != FD_A && args->fd != FD_B))
        return 0;
    fd_slot_t key = {.fd = args->fd, .slot = bpf_log2l(args->count)};
    sizes.increment(key);
    return 0;
}
"""


def test_a_histogram_keyed_by_a_struct_prints_one_section_per_bucket(tmp_path, capsys):
    with open(tmp_path / "a", "wb", buffering=0) as a, open(tmp_path / "b", "wb", buffering=0) as b_file, \
            BPF(text=PER_FD_HIST, cflags=[f"-DTARGET_PID={os.getpid()}", f"-DFD_A={a.fileno()}",
                                          f"-DFD_B={b_file.fileno()}"]) as b:
        for _ in range(4):
            a.write(b"x" * 10)
        b_file.write(b"y" * 3000)
        b["sizes"].print_log2_hist("bytes", "fd", section_print_fn=lambda fd: f"#{fd}",
                                   bucket_sort_fn=sorted)
        fds = [a.fileno(), b_file.fileno()]
    out = capsys.readouterr().out
    sections = re.split(r"\nfd = ", out)[1:]
    assert [s.splitlines()[0] for s in sections] == [f"#{fd}" for fd in fds]
    rows = [{m[0]: int(m[1]) for m in re.findall(r"(\d+ -> \d+)\s*: (\d+)", s) if int(m[1])} for s in sections]
    assert rows == [{"8 -> 15": 4}, {"2048 -> 4095": 1}]


# What BCC's tools write that kernel headers, not BTF, used to give them: an array reached
# through two kernel pointers (mountsnoop's parent comm), a syscall's user string read with
# the _kernel helper (trace's "%s", args->filename), and constants and inline helpers of the
# kernel's headers (filelife's FMODE_CREATED, biolatpcts' min_t/div_u64/NSEC_PER_*).
HEADER_IDIOMS = r"""
#include <linux/sched.h>
#include <linux/fs.h>
#include <linux/time64.h>

struct seen_t {
    char parent_comm[TASK_COMM_LEN];
    char path[192];
    u64 ms;
    u64 created;
    u32 pid_before_tgid;
    u8 on_rq;
};
BPF_ARRAY(seen, struct seen_t, 1);
BPF_ARRAY(names, struct name_t, 1);

TRACEPOINT_PROBE(syscalls, sys_enter_openat) {
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID || args->mode != 0753)
        return 0;
    int zero = 0;
    struct seen_t *s = seen.lookup(&zero);
    if (!s)
        return 0;
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    bpf_probe_read_kernel_str(&s->parent_comm, TASK_COMM_LEN, task->real_parent->comm);
    bpf_probe_read_kernel_str(&s->path, sizeof(s->path), args->filename);
    s->ms = min_t(u64, div_u64(3 * NSEC_PER_MSEC, NSEC_PER_MSEC), 99);
    s->created = FMODE_CREATED;
    s->pid_before_tgid = *(&task->tgid - 1);  /* bindsnoop's way to a bitfield's byte */
    s->on_rq = *(u8 *)((u64)&task->se.on_rq);  /* through a dot and casts (bindsnoop's protocol byte) */
    return 0;
}
"""


def test_header_idioms_of_bccs_tools_read_what_the_kernel_holds(tmp_path):
    import ctypes

    class Name(ctypes.Structure):  # a script's own type for a value, as netqtop's Devname
        _fields_ = [("name", ctypes.c_char * 16)]

    path = tmp_path / "idioms"
    parent_comm = open(f"/proc/{os.getppid()}/comm", "rb").read().strip()
    with BPF(text="struct name_t { char name[16]; };\n" + HEADER_IDIOMS,
             cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o753))
        s = b["seen"][0]
        assert (s.parent_comm, s.path, s.ms, s.created) == (parent_comm, str(path).encode(), 3, 0x100000)
        assert s.pid_before_tgid == threading.get_native_id()  # task_struct: pid, then tgid
        assert s.on_rq == 1  # the running task is queued on its run queue (TASK_ON_RQ_QUEUED)
        b["names"][0] = Name(b"lo")
        assert b["names"][0].name == b"lo"
        with pytest.raises(MapError, match=r"table 'names': a value of 8 bytes \(c_char_Array_8\) where the map's "
                                           r"are 16"):
            b["names"][0] = (ctypes.c_char * 8)()


PROBED_ARGUMENT = r"""
BPF_ARRAY(first_chars, u64, 256);

int on_strtol(struct pt_regs *ctx, const char *nptr) {
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID)
        return 0;
    u8 c = *nptr;  /* BCC reads what a probed function's argument points at, as ext4slower's *ppos */
    first_chars.increment(c);
    return 0;
}
"""


def test_a_probed_functions_pointer_argument_is_read_through():
    import ctypes

    libc = ctypes.CDLL(None)
    with BPF(text=PROBED_ARGUMENT, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        b.attach_uprobe(name="c", sym="strtol", fn_name="on_strtol")
        for text, times in ((b"Q17", 5), (b"Z9", 3)):
            for _ in range(times):
                libc.strtol(text, None, 36)
        counts = {chr(k.value): v.value for k, v in b["first_chars"].items() if v.value}
    assert counts == {"Q": 5, "Z": 3}


def test_uprobes_on_every_function_a_regular_expression_names():
    # dbslower's way of finding MySQL's dispatch_command: functions by pattern, then a uprobe each
    found = dict(BPF.get_user_functions_and_addresses("c", r"getp[pg]id$"))
    assert set(found) == {b"getppid", b"getpgid"}
    from ebpfkit.bcc.facts import _binary
    from ebpfkit.engine.symbols import elf_symbols

    libc = elf_symbols(_binary("c"))
    assert all(addr == libc.symbol_vaddr(name.decode()) for name, addr in found.items())
    text = "BPF_ARRAY(calls, u64, 1);\n" \
           "int on_call(struct pt_regs *ctx) {\n" \
           "    if ((bpf_get_current_pid_tgid() >> 32) == TARGET_PID) calls.atomic_increment(0);\n" \
           "    return 0;\n}\n"
    with BPF(text=text, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        b.attach_uprobe(name="c", sym_re=r"getp[pg]id$", fn_name="on_call")
        assert b.num_open_uprobes() == 2
        for _ in range(7):
            os.getppid()
        for _ in range(4):
            os.getpgid(0)
        assert b["calls"][0].value == 11
        with pytest.raises(EbpfkitError, match="no function of c matches 'nosuchfunction'"):
            b.attach_uprobe(name="c", sym_re="nosuchfunction", fn_name="on_call")


SYSCALL_KPROBES = r"""
#include <linux/fs.h>

BPF_HASH(inflight, u32, u8);
BPF_ARRAY(results, s64, 3);  /* 0: opens entered, 1: of those, returned a descriptor, 2: last error */

int syscall__openat(struct pt_regs *ctx, int dfd, const char __user *filename, int flags)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != TARGET_PID || !(flags & O_NOCTTY))
        return 0;
    u32 tid = id;
    u8 one = 1;
    inflight.update(&tid, &one);
    results.atomic_increment(0);
    return 0;
}

int openat_return(struct pt_regs *ctx)
{
    u32 tid = bpf_get_current_pid_tgid();
    if (!inflight.lookup(&tid))
        return 0;
    inflight.delete(&tid);
    long ret = PT_REGS_RC(ctx);
    if (ret >= 0) {
        results.atomic_increment(1);
    } else {
        int last = 2;
        results.update(&last, &ret);
    }
    return 0;
}

int reads_registers(struct pt_regs *ctx)
{
    return PT_REGS_PARM1(ctx) != 0;
}
"""


def test_kprobes_on_a_syscall_run_on_its_tracepoints_where_there_are_no_kprobes(tmp_path, caplog):
    """opensnoop's shape: a syscall__ entry reading the syscall's arguments and a return probe
    reading its result, attached by get_syscall_fnname. Without kprobes (this host) they run on
    syscalls:sys_enter_openat/sys_exit_openat and see exactly the opens made; with kprobes, on
    the kprobes."""
    import errno

    present = tmp_path / "present"
    present.write_text("x")
    with BPF(text=SYSCALL_KPROBES, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        fn = b.get_syscall_fnname("openat")
        b.attach_kprobe(event=fn, fn_name="syscall__openat")
        b.attach_kretprobe(event=fn, fn_name="openat_return")
        assert b.num_open_kprobes() == 2
        for _ in range(11):
            os.close(os.open(present, os.O_RDONLY | os.O_NOCTTY))
        for _ in range(2):
            with pytest.raises(FileNotFoundError):
                os.open(tmp_path / "absent", os.O_RDONLY | os.O_NOCTTY)
        os.close(os.open(present, os.O_RDONLY))  # not ours: no O_NOCTTY
        results = [b["results"][i].value for i in range(3)]
        b.detach_kprobe(event=fn)
        assert b.num_open_kprobes() == 1
    assert results == [13, 11, -errno.ENOENT]
    if not _have_kprobes():
        assert any("no kprobes on this kernel: kprobes on syscalls run on the syscall's tracepoints (syscall__openat "
                   "on syscalls:sys_enter_openat" in r.getMessage() for r in caplog.records), caplog.records


def _have_kprobes() -> bool:
    from ebpfkit.bcc.bpf import _have_kprobes as have

    return have()


@pytest.mark.skipif(_have_kprobes(), reason="what a kernel without kprobes says (the host's: it has none)")
def test_without_kprobes_what_no_tracepoint_can_stand_in_for_says_so():
    with BPF(text=SYSCALL_KPROBES, cflags=["-DTARGET_PID=1"]) as b:
        with pytest.raises(NotSupportedError, match="do_sys_openat2 is not a syscall's function") as e:
            b.attach_kprobe(event="do_sys_openat2", fn_name="syscall__openat")
        assert e.value.exit_code == 3
        with pytest.raises(NotSupportedError, match=r"reads registers a kprobe gives \(PT_REGS_PARMn, PT_REGS_IP\), past "
                                                    r"the end of what syscalls:sys_enter_getpid records"):
            b.attach_kprobe(event=b.get_syscall_fnname("getpid"), fn_name="reads_registers")
        assert b.num_open_kprobes() == 0


@pytest.mark.skipif(BPF.support_kfunc(), reason="what a kernel without fentry says (the host's: it has none)")
def test_a_kfunc_probe_where_there_is_no_fentry_says_so():
    with pytest.raises(NotSupportedError, match="kfunc__do_sys_openat2: this kernel has no fentry programs") as e:
        BPF(text="KFUNC_PROBE(do_sys_openat2, int dfd) { return 0; }")
    assert e.value.exit_code == 3


KERNEL_POINTER_IN_A_MAP_VALUE = r"""
#include <linux/sched.h>

struct held_t { u64 seen; struct task_struct *task; };
BPF_HASH(held, u32, struct held_t);
BPF_ARRAY(parent, u32, 1);

TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    if (pid != TARGET_PID)
        return 0;
    struct held_t fresh = {.task = (struct task_struct *)bpf_get_current_task()};
    struct held_t *h = held.lookup_or_try_init(&pid, &fresh);
    if (!h)
        return 0;
    h->seen++;
    int zero = 0;
    u32 tgid = h->task->real_parent->tgid;  /* ext4slower's valp->fp->f_path.dentry */
    parent.update(&zero, &tgid);
    return 0;
}
"""


def test_a_kernel_pointer_kept_in_a_map_value_is_read_through():
    """The chain starts in the program's own memory (a map value's member) and goes on through
    kernel pointers: only the kernel part is a CO-RE read (the program's struct is not the
    kernel's, and a relocation against it would fail to load)."""
    with BPF(text=KERNEL_POINTER_IN_A_MAP_VALUE, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        for _ in range(3):
            ppid = os.getppid()
        assert b["held"][os.getpid()].seen == 3
        assert b["parent"][0].value == ppid


KERNEL_POINTER_ARRAY = r"""
#include <linux/sched.h>
#include <linux/fdtable.h>

BPF_ARRAY(inode, u64, 1);

/* a helper handed the kernel's array of file pointers: virtiostat's count_len(sgs, ...) */
static u64 inode_of(struct file **fds, int fd)
{
    struct file *f = fds[fd];

    return f ? f->f_inode->i_ino : 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID)
        return 0;
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    struct file **fds = task->files->fdt->fd;
    int zero = 0;
    u64 ino = inode_of(fds, TARGET_FD);
    inode.update(&zero, &ino);
    return 0;
}
"""


def test_an_element_of_a_kernel_array_of_pointers_is_read_through(tmp_path):
    """``fds[fd]`` where ``fds`` is the kernel's ``struct file **`` (a helper's parameter):
    the inode of the file this process holds open at that descriptor."""
    held = tmp_path / "held"
    held.write_text("x")
    fd = os.open(held, os.O_RDONLY)
    try:
        with BPF(text=KERNEL_POINTER_ARRAY, cflags=[f"-DTARGET_PID={os.getpid()}", f"-DTARGET_FD={fd}"]) as b:
            os.getppid()
            assert b["inode"][0].value == os.fstat(fd).st_ino != 0
    finally:
        os.close(fd)


HELPER_CALLED_TWICE = r"""
BPF_ARRAY(sums, u64, 2);

/* big enough (unrolled) that clang would keep it a function of its own, called twice */
static u64 mix(u64 x)
{
#pragma clang loop unroll(full)
    for (int i = 0; i < 64; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL + (x >> 7);
    return x;
}

TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_PID)
        return 0;
    int zero = 0, one = 1;
    u64 pid = bpf_get_current_pid_tgid() >> 32;
    u64 a = mix(pid), b = mix(pid + 1);
    sums.update(&zero, &a);
    sums.update(&one, &b);
    return 0;
}
"""


def mix(x: int) -> int:
    for _ in range(64):
        x = (x * 6364136223846793005 + 1442695040888963407 + (x >> 7)) % 2**64
    return x


def test_the_programs_own_functions_are_inlined_as_bcc_does():
    """BCC inlines every function of a program; so does the translation: the kernel sees one
    function (no BPF-to-BPF call, which 6.1's verifier explores far longer in a loop), and
    the helper computed what Python computes."""
    with BPF(text=HELPER_CALLED_TWICE, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        os.getppid()
        assert [b["sums"][i].value for i in range(2)] == [mix(os.getpid()), mix(os.getpid() + 1)]
        prog = b._objects[next(iter(b._objects))].programs["tracepoint__syscalls__sys_enter_getppid"]
        assert prog.info().nr_func_info == 1  # the program alone: no subprogram


LITERAL_COPY = r"""
typedef struct dist_key { char op[16]; u64 slot; } dist_key_t;
BPF_HISTOGRAM(dist, dist_key_t);

static __attribute__((noinline)) int count(const char *op)
{
    dist_key_t key = {.slot = 1};
    __builtin_memcpy(&key.op, op, sizeof(key.op));  /* ext4dist's: 16 bytes from a shorter literal */
    dist.atomic_increment(key);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_getppid) { if ((bpf_get_current_pid_tgid() >> 32) == TARGET_PID) count("read"); return 0; }
TRACEPOINT_PROBE(syscalls, sys_enter_getpgid) { if ((bpf_get_current_pid_tgid() >> 32) == TARGET_PID) count("fsync"); return 0; }
"""


def test_a_fixed_size_copy_from_the_last_string_literal_stays_in_bounds():
    with BPF(text=LITERAL_COPY, cflags=[f"-DTARGET_PID={os.getpid()}"]) as b:
        for _ in range(2):
            os.getppid()
        os.getpgid(0)
        assert {k.op: v.value for k, v in b["dist"].items()} == {b"read": 2, b"fsync": 1}


def test_a_program_sees_the_kernels_version_and_configuration():
    """BCC's tools choose code by LINUX_VERSION_CODE (ttysnoop: tty_write's arguments) and
    CONFIG_* options (opensnoop), which their headers defined and BTF does not carry."""
    from ebpfkit.sysinfo.kconfig import version_code

    text = """
    BPF_ARRAY(facts, u64, 2);
    TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
        int version = 0, bpf_syscall = 1;
        u64 code = LINUX_VERSION_CODE;
    #if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 0, 0) && defined(CONFIG_BPF_SYSCALL)
        u64 yes = 1;
        facts.update(&bpf_syscall, &yes);
    #endif
        facts.update(&version, &code);
        return 0;
    }
    """
    with BPF(text=text) as b:
        os.getppid()
        assert [b["facts"][i].value for i in range(2)] == [version_code(), 1]

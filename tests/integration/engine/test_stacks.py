"""Stack traces end to end: a perf_event program samples (cpu-clock, 999 Hz) a child process
we build, records user and kernel stack ids with bpf_get_stackid, and StackTraces turns
them into names: the child's hot function, and kernel functions of /proc/kallsyms."""

from __future__ import annotations

import os
import select
import shutil
import subprocess

import pytest

import ebpfkit
from ebpfkit.engine.symbols import StackTraces, Symbolizer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]

BPF = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ebpfkit.h"

const volatile int targ_tgid = 0;

struct sample_key {
    u32 pid;
    s32 user_stack;
    s32 kernel_stack;
};

EK_STACK_MAP(stacks, 4096);

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, struct sample_key);
    __type(value, u64);
} counts SEC(".maps");

SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;

    if (tgid != targ_tgid)
        return 0;
    struct sample_key k = {.pid = tgid};
    k.user_stack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
    k.kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
    u64 one = 1, *v = bpf_map_lookup_elem(&counts, &k);
    if (v)
        __sync_fetch_and_add(v, 1);
    else
        bpf_map_update_elem(&counts, &k, &one, BPF_NOEXIST);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""

CHILD = r"""
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long spin_here(double seconds)
{
    volatile unsigned long n = 0;
    double end = now() + seconds;

    while (now() < end)
        for (int i = 0; i < 100000; i++)
            n++;
    return n;
}

/* time in the kernel, so kernel stacks get sampled too */
__attribute__((noinline)) void syscalls_here(double seconds)
{
    static char buf[1 << 16];
    int fd = open("/dev/zero", O_RDONLY);
    double end = now() + seconds;

    while (now() < end)
        if (read(fd, buf, sizeof(buf)) < 0)
            break;
    close(fd);
}

int main(void)
{
    char c;

    printf("ready\n");
    fflush(stdout);
    if (read(0, &c, 1) != 1)
        return 1;
    spin_here(1.0);
    syscalls_here(0.3);
    printf("done\n");
    fflush(stdout);
    return read(0, &c, 1) < 0; /* stay alive until the test closes stdin */
}
"""


@pytest.fixture
def child(tmp_path):
    src = tmp_path / "spin.c"
    src.write_text(CHILD)
    exe = tmp_path / "spin"
    subprocess.run(["gcc", "-O0", "-fno-omit-frame-pointer", "-o", str(exe), str(src)], check=True)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert _readline(proc, 10) == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _readline(proc, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the child program did not answer in time"
    return proc.stdout.readline().strip()


def _kallsyms_names() -> set[str]:
    with open("/proc/kallsyms") as f:
        return {line.split()[2] for line in f}


def _sample(child) -> tuple[dict, dict, Symbolizer]:
    """Run the child's work under the sampler. Returns the sample counts by (user, kernel)
    stack id and the stacks resolved while the object was still loaded."""
    spec = ebpfkit.compile(text=BPF, name="test_stacks.bpf.c")
    spec.rodata["targ_tgid"] = child.pid
    symbolizer = Symbolizer()
    symbolizer.remember(child.pid)  # maps read now: frames still resolve if the child exits
    with spec.load() as obj:
        obj.programs["sample"].attach_perf_event(frequency=999)
        child.stdin.write("g")
        child.stdin.flush()
        assert _readline(child, 20) == "done"
        counts = {(k["user_stack"], k["kernel_stack"]): v for k, v in obj.maps["counts"].items()}
        stacks = StackTraces(obj.maps["stacks"], symbolizer)
        user = {uid: stacks.resolve(uid, pid=child.pid, kernel=False) for uid, _ in counts}
        kernel = {kid: stacks.resolve(kid) for _, kid in counts}
        formatted = {uid: stacks.symbolize(uid, pid=child.pid, kernel=False) for uid, _ in counts}
    return counts, {"user": user, "kernel": kernel, "formatted": formatted}, symbolizer


def _caller_of(frames, name: str) -> str | None:
    names = [f.name for f in frames]
    i = names.index(name)
    return names[i + 1] if i + 1 < len(names) else None


def test_user_and_kernel_stacks_symbolize(child):
    counts, resolved, _ = _sample(child)
    assert sum(counts.values()) > 100, f"too few samples of the child: {counts}"

    user_stacks = [frames for frames in resolved["user"].values() if frames]
    assert user_stacks, "no user stack was recorded"
    spinning = [frames for frames in user_stacks if any(f.name == "spin_here" for f in frames)]
    assert spinning, f"spin_here is in no user stack: {user_stacks[:5]}"
    # frame pointers unwind past spin_here into main
    assert any(_caller_of(frames, "spin_here") == "main" for frames in spinning), spinning[:5]
    assert all(f.module == "spin" for frames in spinning for f in frames if f.name in ("spin_here", "main"))
    formatted = [line for lines in resolved["formatted"].values() for line in lines]
    assert any(line.startswith("spin_here+0x") and line.endswith("[spin]") for line in formatted)

    kernel_stacks = [frames for frames in resolved["kernel"].values() if frames]
    assert kernel_stacks, "no kernel stack was recorded although the child spent time in read()"
    assert any("read" in f.name for frames in kernel_stacks for f in frames), kernel_stacks[:5]
    names = _kallsyms_names()
    for frames in kernel_stacks:
        for frame in frames:
            assert frame.known and frame.name in names, f"kernel frame {frame} not in /proc/kallsyms"


def test_negative_stack_ids_mean_no_stack(child):
    counts, resolved, _ = _sample(child)
    # user-mode samples have no kernel stack: bpf_get_stackid returned a negative errno
    no_kernel = [kid for (_, kid) in counts if kid < 0]
    assert no_kernel, f"every sample had a kernel stack: {counts}"
    assert all(resolved["kernel"][kid] == [] for kid in no_kernel)

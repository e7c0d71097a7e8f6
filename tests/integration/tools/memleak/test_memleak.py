"""memleak against the real kernel. Programs built here (leak.c, leak.cpp, with frame
pointers) leak exactly LEAKS blocks of SIZE bytes from leak_here() after "go" on their stdin,
and allocate and free many more through every allocator function from balanced(); they say
"done" and wait. The leaks are the ground truth: the stack naming leak_here holds exactly
LEAKS x SIZE bytes in LEAKS allocations, and no balanced() stack is outstanding."""

from __future__ import annotations

import glob
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import RunningTool, ek, signalled_run_leaves_nothing

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

HERE = Path(__file__).parent
LEAKS, SIZE, THREADS = 5, 3000, 16
ROUNDS = 200  # leak.c's balanced() rounds per thread
# allocating calls in one balanced() round that reach an allocator probe: malloc, calloc, two
# reallocs, posix_memalign, aligned_alloc, memalign, valloc, mmap, malloc(10) (realloc(p, 0)
# returns nothing); under jemalloc also mallocx twice and rallocx
CALLS_PER_ROUND = {"glibc": 10, "jemalloc": 13, "tcmalloc": 10}
# Debian's packages (libjemalloc2, libtcmalloc-minimal4; scripts/setup.sh --test installs them)
ALLOCATOR_FILES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}
# glibc's tcache: 64 bins of at most 7 chunks by default, handed back to free() at thread exit
TCACHE_BINS, TCACHE_COUNT = 64, 7


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("memleak")
    built = {"c": out / "leak", "cpp": out / "leakpp"}
    subprocess.run(["gcc", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", built["c"], HERE / "leak.c"],
                   check=True)
    subprocess.run(["g++", "-g", "-fno-omit-frame-pointer", "-o", built["cpp"], HERE / "leak.cpp"], check=True)
    return built


def allocator_file(allocator: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/*/{ALLOCATOR_FILES[allocator]}"))
    assert found, f"{ALLOCATOR_FILES[allocator]} is not installed (scripts/setup.sh --test installs it)"
    return found[0]


def start(binary, *args, preload: str | None = None, **env):
    """``binary ARGS``, with ``preload`` as LD_PRELOAD (how a user runs a program on jemalloc or
    tcmalloc) and ``env`` added to its environment."""
    if preload:
        env["LD_PRELOAD"] = allocator_file(preload)
    program = subprocess.Popen([str(binary), *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, **env})
    # past the dynamic loader (the allocator a tracer looks for is mapped), waiting for "go"
    assert program.stdout.readline().startswith("ready"), "the program did not start"
    return program


def go(program) -> None:
    """Let it allocate; back once it has ("done")."""
    program.stdin.write("go\n")
    program.stdin.flush()
    assert program.stdout.readline().startswith("done"), "the program did not finish allocating"


def samples_in(stdout: str) -> int:
    """Complete samples (JSON lines) in ``stdout`` so far."""
    return sum(1 for line in stdout.split("\n")[:-1] if line.startswith("{"))


def last_sample(stdout: str) -> dict:
    samples = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert samples, stdout
    return samples[-1]


def traced_by_pid(program, *options) -> tuple[dict, str]:
    """`ebpfkit memleak -p PID OPTIONS 0.5` while the program allocates: its last sample, stderr."""
    tool = RunningTool("--format", "json", "memleak", "-p", str(program.pid), *options, "0.5")
    try:
        go(program)
        # three samples after the program is done: the last was taken an interval or more
        # after it (a sample can take long to print on a slow machine: symbols are new)
        before = samples_in(tool.read_stdout_so_far())
        tool.wait_for_stdout(lambda out: samples_in(out) >= before + 3)
        stdout = tool.stop()
        assert tool.returncode == 0, tool.stderr
        return last_sample(stdout), tool.stderr
    finally:
        tool.kill()
        program.kill()
        program.wait()


def allocating_line(source: str, function: str) -> str:
    """``source``:N of the allocation in ``function`` (its first line with malloc or new): where
    the frame that called the allocator must point."""
    lines = (HERE / source).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if f" {function}(" in line and "noinline" in line)
    n = next(i for i in range(start, len(lines)) if "malloc(" in lines[i] or " new " in lines[i])
    return f"{source}:{n + 1}"


C_LEAK = f"leak_here ({allocating_line('leak.c', 'leak_here')}) [leak]"
CPP_LEAK = f"leak_here(unsigned long) ({allocating_line('leak.cpp', 'leak_here')}) [leakpp]"


def assert_only_the_leak(sample: dict, leaks: int, size: int, expected_frame: str = C_LEAK) -> None:
    stacks = sample["stacks"]
    leaking = [s for s in stacks if any("leak_here" in f for f in s["frames"])]
    assert len(leaking) == 1, stacks
    assert (leaking[0]["bytes"], leaking[0]["count"]) == (leaks * size, leaks), leaking[0]
    assert leaking[0]["frames"][0] == expected_frame, leaking[0]["frames"]
    assert not [s for s in stacks if any("balanced" in f for f in s["frames"])], stacks
    assert sample["counters"]["stack_missed"] == sample["counters"]["allocs_full"] == 0, sample["counters"]


def test_one_thread_by_pid(programs):
    sample, _ = traced_by_pid(start(programs["c"], 0, LEAKS, SIZE))
    assert_only_the_leak(sample, LEAKS, SIZE)
    leak = next(s for s in sample["stacks"] if "leak_here" in s["frames"][0])
    # allocated before the 1.2 s wait, sampled every 0.5 s: the last sample is one interval or
    # more after it, less the timer's jitter (CI saw 499 ms once)
    assert leak["oldest_ms"] >= 450
    assert sample["counters"]["unknown_frees"] == 0, sample["counters"]


@pytest.mark.parametrize("combined", [False, True], ids=["full", "combined-only"])
def test_sixteen_threads_exact(programs, combined):
    options = ["--combined-only"] if combined else []
    sample, _ = traced_by_pid(start(programs["c"], THREADS, LEAKS, SIZE), *options)
    assert_only_the_leak(sample, THREADS * LEAKS, SIZE)
    if combined:
        assert all(s["oldest_ms"] is None for s in sample["stacks"])
    # glibc frees each exiting thread's tcache (its cached free chunks, then itself): not the
    # program's frees, nor ever recorded (test_thread_exit_frees_are_glibcs_tcache)
    assert sample["counters"]["unknown_frees"] <= THREADS * (TCACHE_BINS * TCACHE_COUNT + 1), sample["counters"]


def test_thread_exit_frees_are_glibcs_tcache(programs):
    """The only frees of unrecorded addresses in a threaded program are glibc's at thread exit
    (tcache_thread_shutdown: the chunks the thread's tcache holds, then the tcache itself,
    allocated inside malloc): with the tcache holding no chunk, exactly one per thread is left."""
    program = start(programs["c"], THREADS, LEAKS, SIZE, GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
    sample, _ = traced_by_pid(program)
    assert_only_the_leak(sample, THREADS * LEAKS, SIZE)
    assert sample["counters"]["unknown_frees"] == THREADS, sample["counters"]


def assert_every_call_seen(sample: dict, allocator: str, threads: int) -> None:
    """Every allocating call balanced() made was recorded (the allocator's own API and its mmap
    wrappers included), and every free found its allocation."""
    counters = sample["counters"]
    assert counters["allocs"] >= max(threads, 1) * ROUNDS * CALLS_PER_ROUND[allocator], counters
    assert counters["unknown_frees"] == 0, counters


@pytest.mark.parametrize("threads", [0, THREADS], ids=["one-thread", "16-threads"])
@pytest.mark.parametrize("how", ["preset", "detected"])
@pytest.mark.parametrize("allocator", ["jemalloc", "tcmalloc"])
def test_allocator_preloaded(programs, allocator, how, threads):
    """The program on jemalloc or tcmalloc (LD_PRELOAD): the leak found exactly with
    --allocator, and with the allocator detected from the maps."""
    options = ["--allocator", allocator] if how == "preset" else []
    sample, _ = traced_by_pid(start(programs["c"], threads, LEAKS, SIZE, preload=allocator), *options)
    assert_only_the_leak(sample, max(threads, 1) * LEAKS, SIZE)
    assert_every_call_seen(sample, allocator, threads)


@pytest.mark.parametrize("allocator", ["jemalloc", "tcmalloc"])
def test_cpp_new_preloaded(programs, allocator):
    """Their own operator new/delete (sized delete too; tcmalloc's share malloc's and free's code)."""
    sample, _ = traced_by_pid(start(programs["cpp"], LEAKS, SIZE, preload=allocator))
    assert_only_the_leak(sample, LEAKS, SIZE, CPP_LEAK)
    assert sample["counters"]["unknown_frees"] == 0, sample["counters"]


def test_cpp_new(programs):
    sample, _ = traced_by_pid(start(programs["cpp"], LEAKS, SIZE))
    assert_only_the_leak(sample, LEAKS, SIZE, CPP_LEAK)  # demangled, with file:line
    assert sample["counters"]["unknown_frees"] == 0, sample["counters"]  # delete's own free() is not one


def traced_command(command: str) -> tuple[dict, str]:
    """`ebpfkit memleak -c COMMAND 0.5`, "go" sent at once: its last sample and the command's
    output, ended three samples after the command said "done"."""
    tool = RunningTool("--format", "json", "memleak", "-c", command, "0.5", stdin="go\n")
    try:
        out = tool.wait_for_stdout(lambda out: "done" in out)
        before = samples_in(out)
        tool.wait_for_stdout(lambda out: samples_in(out) >= before + 3)
        stdout = tool.stop()
    finally:
        tool.kill()
    assert tool.returncode == 0, tool.stderr
    return last_sample(stdout), stdout


def test_command_started_held_until_traced(programs):
    """-c: the program's first allocations are seen (it allocates right after "go", which
    the test sends at once: the tool holds it before its exec until attached)."""
    sample, stdout = traced_command(f"{programs['c']} 0 {LEAKS} {SIZE}")
    assert "done 5" in stdout
    assert_only_the_leak(sample, LEAKS, SIZE)


@pytest.mark.parametrize("allocator", ["jemalloc", "tcmalloc"])
def test_command_with_preload(programs, allocator):
    """-c "LD_PRELOAD=LIB CMD ARGS": the setting is the command's environment, as in a shell, and
    the allocator it preloads is detected before the command runs."""
    sample, stdout = traced_command(f"LD_PRELOAD={allocator_file(allocator)} {programs['c']} 0 {LEAKS} {SIZE}")
    assert "done 5" in stdout
    assert_only_the_leak(sample, LEAKS, SIZE)
    assert_every_call_seen(sample, allocator, 0)


def test_a_full_stack_map_is_counted_and_shown(programs):
    sample, stderr = traced_by_pid(start(programs["c"], 0, LEAKS, SIZE), "--stack-storage-size", "2")
    missed = sample["counters"]["stack_missed"]
    assert missed > 0, sample["counters"]
    assert f"{missed} stacks not recorded (stack map full" in stderr, stderr
    assert any(s["frames"] == ["[stack not recorded: stack map full]"] for s in sample["stacks"]), sample


SITES = 20
# one leak from each of SITES call sites, each its own stack; "ready", "go", "done" as leak.c
SITES_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define SITE(n) __attribute__((noinline)) void site_##n(void) { memset(malloc(%d), n, 1); }
SITE(0) SITE(1) SITE(2) SITE(3) SITE(4) SITE(5) SITE(6) SITE(7) SITE(8) SITE(9)
SITE(10) SITE(11) SITE(12) SITE(13) SITE(14) SITE(15) SITE(16) SITE(17) SITE(18) SITE(19)
int main(void)
{
	void (*sites[])(void) = {site_0, site_1, site_2, site_3, site_4, site_5, site_6, site_7, site_8,
				 site_9, site_10, site_11, site_12, site_13, site_14, site_15, site_16,
				 site_17, site_18, site_19};
	char line[16];

	setvbuf(stdout, NULL, _IONBF, 0); /* no buffer allocated while traced */
	printf("ready\n");
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < %d; i++)
		sites[i]();
	printf("done\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
""" % (SIZE, SITES)


def test_stacks_whose_slot_is_taken_are_kept_apart(tmp_path):
    """A stack map keeps one stack per bucket. With 8 buckets, 20 leaking call sites cannot
    all have one: those refused go to the spill map (2 buckets, ids from SPILL_BASE), where the
    first one surely finds room. Every leaked byte is still counted, on a stack or as missed."""
    from ebpfkit.tools.memleak.session import SPILL_BASE

    source, binary = tmp_path / "sites.c", tmp_path / "sites"
    source.write_text(SITES_C)
    subprocess.run(["gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-o", binary, source], check=True)
    sample, _ = traced_by_pid(start(binary), "--stack-storage-size", "8", "-T", "100")
    stacks = [s for s in sample["stacks"] if any("site_" in f for f in s["frames"]) or s["stack_id"] < 0]
    assert sum(s["bytes"] for s in stacks) == SITES * SIZE, stacks
    spilled = [s for s in stacks if s["stack_id"] >= SPILL_BASE]
    assert spilled and all(s["frames"][0].startswith("site_") for s in spilled), stacks
    assert len([s for s in stacks if s["stack_id"] >= 0]) <= 8 + 2, stacks


def _leak_traced_in_process(program, monkeypatch, uprobe_multi: bool) -> tuple[dict, dict]:
    """memleak's session on ``program`` (uprobe_multi links, or a link per uprobe as on kernels
    before 6.6): the leak's (bytes, count) and the kinds of the kernel links of its programs."""
    from ebpfkit.engine import features, inventory
    from ebpfkit.engine.features import UNSUPPORTED, Probe
    from ebpfkit.tools import memleak

    if not uprobe_multi:
        real = features.probe
        monkeypatch.setattr(features, "probe", lambda name: Probe(name, name, UNSUPPORTED, "as on 6.1")
                            if name == "uprobe_multi" else real(name))
    try:
        with memleak.open(pid=program.pid) as session:
            assert session.multi == uprobe_multi
            ours = {prog_id: name for name, prog_id in session._obj.program_ids().items()}
            kinds: dict = {}
            for link in inventory.links():
                if link.prog_id in ours:
                    kinds.setdefault(ours[link.prog_id], []).append(link.type.name)
                    if link.places is not None:  # the kernel's count of a multi link's uprobes
                        kinds.setdefault("places", []).append(link.places)
            if not kinds:  # no perf_event bpf_link (5.15): each uprobe is a perf event fd of ours
                for prog_id in _perf_event_programs():
                    if prog_id in ours:
                        kinds.setdefault(ours[prog_id], []).append("PERF_EVENT")
            if uprobe_multi:
                assert sum(kinds.pop("places")) == len(session.plan.probes), kinds
            go(program)
            leak = next(s for s in session.sample().stacks if str(s.frames[0]).startswith("leak_here"))
            return (leak.bytes, leak.count), kinds
    finally:
        program.kill()
        program.wait()


def _perf_event_programs() -> list[int]:
    """The program of each perf event fd this process holds: where the kernel has no
    perf_event bpf_link, what attaches a uprobe."""
    from ebpfkit.engine import inventory

    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[perf_event]":
                continue
        except OSError:
            continue
        prog_id = inventory.perf_event_program(os.getpid(), int(fd))
        if prog_id is not None:
            found.append(prog_id)
    return found


def test_one_uprobe_multi_link_per_program_and_file_where_the_kernel_has_them(programs, monkeypatch):
    """Where the kernel has uprobe_multi (6.6; this project's hosts), each program gets one link
    for all its places (leaving then waits for one grace period, not 36); elsewhere a perf link
    per uprobe, untold. The leak is exact either way."""
    from ebpfkit.engine import features

    multi = features.probe("uprobe_multi").supported
    leak, kinds = _leak_traced_in_process(start(programs["c"], 0, LEAKS, SIZE), monkeypatch, multi)
    assert leak == (LEAKS * SIZE, LEAKS)
    if multi:
        assert kinds["alloc_return"] == ["UPROBE_MULTI"] and kinds["malloc_enter"] == ["UPROBE_MULTI"], kinds
        assert {kind for k in kinds.values() for kind in k} == {"UPROBE_MULTI"}, kinds
    else:
        assert {kind for k in kinds.values() for kind in k} == {"PERF_EVENT"}, kinds
    assert "delete_enter" not in kinds  # no C++ here: not even loaded


def test_a_link_per_uprobe_without_uprobe_multi(programs, monkeypatch):
    """The way kernels before 6.6 attach (a perf link per uprobe), on this host: same result."""
    leak, kinds = _leak_traced_in_process(start(programs["c"], 0, LEAKS, SIZE), monkeypatch, False)
    assert leak == (LEAKS * SIZE, LEAKS)
    assert len(kinds["alloc_return"]) == 8 and {kind for k in kinds.values() for kind in k} == {"PERF_EVENT"}, kinds


def test_user_mode_loads_without_the_kernels_btf(caplog):
    """The uprobe programs read registers at their ABI offsets (ek_user_regs.h), not through
    CO-RE: libbpf then never parses the kernel's BTF, 10-17 ms of every start and ~10 MiB."""
    from ebpfkit.engine import compile as compile_bpf
    from ebpfkit.tools.memleak.session import PROGRAM

    caplog.set_level(logging.DEBUG, logger="ebpfkit.libbpf")  # libbpf's own lines
    compile_bpf(PROGRAM).load().close()
    lines = [r.getMessage() for r in caplog.records if r.name == "ebpfkit.libbpf"]
    assert any("created successfully" in line for line in lines), lines[:5]  # listened
    assert not [line for line in lines if "kernel BTF" in line or "CO-RE" in line]


def test_sigkill_leaves_nothing(programs):
    program = start(programs["c"], 0, LEAKS, SIZE)
    try:
        signalled_run_leaves_nothing(["memleak", "-p", program.pid, "1"], signal.SIGKILL)
    finally:
        program.kill()
        program.wait()


@pytest.mark.parametrize("args, message", [
    (["-p", "1", "-c", "true"], "cannot be combined with command"),
    (["-p", "1", "--combined-only", "-o", "100"], "cannot be combined with min_age_ms"),
    (["-c", "no-such-program-here"], "'no-such-program-here': no such program"),
    (["-c", "LD_PRELOAD=/x.so"], "names no program to run"),
    (["-p", "1", "-z", "100", "-Z", "10"], "must be at least min_size (100)"),
    (["-p", "1", "-s", "0"], "must be greater than 0"),
    (["-p", str(os.getpid()), "--allocator", "jemalloc"], "jemalloc: no libjemalloc.so* among the process's libraries"),
    (["-p", str(os.getpid()), "-O", "/no/such/lib.so"], "/no/such/lib.so: no such file"),
    (["-p", "1", "--allocator", "mimalloc"], "'mimalloc' is not one of"),
])
def test_bad_options_exit_2(capsys, args, message):
    rc, _, err = ek(capsys, "memleak", *args, "1", "1")
    assert rc == 2, err
    assert message in " ".join(err.split()), err

"""Source-level stacks end to end: programs built here with gcc/g++ (-g -O2, PIE, frame
pointers) and a shared library built here too; a real uprobe and uretprobe on the library's
function record user stacks in a BPF stack map, and StackTraces/user_source_frames must name
every frame exactly: function (C++ demangled), file and line (found by markers in the sources
the test wrote), the inlined frame, the module. Then the fallbacks: debug info stripped, no
llvm-symbolizer, a deleted binary, a process that exited."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time

import pytest

import ebpfkit
from ebpfkit.engine import srclines
from ebpfkit.engine.srclines import SourceFrame, user_source_frames, user_source_stacks
from ebpfkit.engine.symbols import UNKNOWN, StackTraces, Symbolizer

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("g++")), reason="needs gcc and g++")
needs_symbolizer = pytest.mark.skipif(srclines.find_llvm_symbolizer() is None,
                                      reason="needs llvm-symbolizer (Debian's llvm, installed with clang)")

LIBRARY = r"""
__attribute__((noinline)) int lib_work(int x) { __asm__ volatile(""); return x * 3 + 1; } /* L:lib_work */
"""

PROGRAM = r"""
#include <stdio.h>
#include <unistd.h>

int lib_work(int x);

static inline __attribute__((always_inline)) int add_work(int x)
{
    return lib_work(x) + 1; /* L:add_work */
}

__attribute__((noinline)) int leak_here(int x)
{
    return add_work(x) * 2; /* L:leak_here */
}

int main(void)
{
    char c;

    printf("%p %p\n", (void *)leak_here, (void *)lib_work);
    fflush(stdout);
    if (read(0, &c, 1) != 1)
        return 1;
    printf("%d\n", leak_here(c)); /* L:main */
    fflush(stdout);
    return read(0, &c, 1) < 0; /* stay alive until the test closes stdin */
}
"""

CXX_PROGRAM = r"""
#include <cstdio>
#include <unistd.h>

namespace leaky {
struct Pool {
    static int grab(int n);
};
__attribute__((noinline)) int Pool::grab(int n) { __asm__ volatile(""); return n * 5 + 2; } /* L:grab */
}

int main()
{
    char c;
    std::printf("%p\n", (void *)&leaky::Pool::grab);
    std::fflush(stdout);
    return read(0, &c, 1) < 0 ? leaky::Pool::grab(c) : 0;
}
"""

FLAGS = ["-g", "-O2", "-fno-omit-frame-pointer"]

BPF = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ebpfkit.h"

const volatile int targ_tgid = 0;
s32 entry_stack = -1, return_stack = -1;

EK_STACK_MAP(stacks, 64);

static __always_inline int mine(void)
{
    return (bpf_get_current_pid_tgid() >> 32) == targ_tgid;
}

SEC("uprobe")
int on_entry(struct pt_regs *ctx)
{
    if (mine())
        entry_stack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
    return 0;
}

SEC("uretprobe")
int on_return(struct pt_regs *ctx)
{
    if (mine())
        return_stack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""


def line_of(source: str, marker: str) -> int:
    """The 1-based line of ``source`` holding the comment /* L:marker */."""
    lines = [n for n, text in enumerate(source.splitlines(), 1) if f"/* L:{marker} */" in text]
    assert len(lines) == 1, marker
    return lines[0]


def _build(tmp_path, strip_debug: bool = False):
    """libsrcl.so and srcl (linked against it, found through its rpath); the paths."""
    lib_src, src = tmp_path / "libsrcl.c", tmp_path / "srcl.c"
    lib_src.write_text(LIBRARY)
    src.write_text(PROGRAM)
    lib, exe = tmp_path / "libsrcl.so", tmp_path / "srcl"
    subprocess.run(["gcc", *FLAGS, "-shared", "-fPIC", "-o", str(lib), str(lib_src)], check=True)
    subprocess.run(["gcc", *FLAGS, "-o", str(exe), str(src), f"-L{tmp_path}", "-lsrcl",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    if strip_debug:  # the program keeps .symtab, the library only .dynsym
        subprocess.run(["strip", "--strip-debug", str(exe)], check=True)
        subprocess.run(["strip", "--strip-all", str(lib)], check=True)
    return lib, exe


class Child:
    """A program built here, started, its first stdout line (addresses it prints) read."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.addresses = [int(word, 16) for word in self.readline().split()]

    def readline(self, timeout: float = 10) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "the child program did not answer in time"
        return self.proc.stdout.readline().strip()

    def go(self) -> str:
        self.proc.stdin.write("g")
        self.proc.stdin.flush()
        return self.readline()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def program(tmp_path):
    lib, exe = _build(tmp_path)
    child = Child([str(exe)])
    try:
        yield child, lib, exe
    finally:
        child.stop()


@pytest.fixture
def fresh_symbolizer():
    """Each test starts its own llvm-symbolizer and answer cache, and stops it after."""
    srclines.reset_llvm_symbolizer()
    yield
    srclines.reset_llvm_symbolizer()


# --- real stacks from a uprobe and a uretprobe -------------------------------------------------

@needs_symbolizer
@pytest.mark.integration
def test_uprobe_stacks_name_function_file_line_inline_frame_and_module(program, fresh_symbolizer):
    child, lib, _ = program
    spec = ebpfkit.compile(text=BPF, name="test_srclines.bpf.c")
    spec.rodata["targ_tgid"] = child.pid
    with spec.load() as obj:
        obj.programs["on_entry"].attach_uprobe(str(lib), symbol="lib_work", pid=child.pid)
        obj.programs["on_return"].attach_uprobe(str(lib), symbol="lib_work", pid=child.pid, retprobe=True)
        assert child.go() == str((ord("g") * 3 + 1 + 1) * 2)
        stacks = StackTraces(obj.maps["stacks"])
        entry_id, return_id = obj.data["entry_stack"], obj.data["return_stack"]
        assert entry_id >= 0 and return_id >= 0, (entry_id, return_id)
        at_entry = stacks.source_frames(entry_id, pid=child.pid, kernel=False)
        at_return = stacks.source_frames(return_id, pid=child.pid, kernel=False, return_addresses_from=0)

    src, lib_src = str(lib.with_name("srcl.c")), str(lib.with_name("libsrcl.c"))
    main = SourceFrame("main", src, line_of(PROGRAM, "main"), False, "srcl")
    # at the uretprobe every address is a return address: each resolves to its call's line
    assert at_return[:3] == [
        SourceFrame("add_work", src, line_of(PROGRAM, "add_work"), True, "srcl"),
        SourceFrame("leak_here", src, line_of(PROGRAM, "leak_here"), False, "srcl"),
        main,
    ], at_return
    assert str(at_return[0]) == f"inlined: add_work (srcl.c:{line_of(PROGRAM, 'add_work')}) [srcl]"
    assert str(at_return[1]) == f"leak_here (srcl.c:{line_of(PROGRAM, 'leak_here')}) [srcl]"
    assert at_return[3].module == "libc.so.6" and at_return[3].function != UNKNOWN, at_return
    # at the uprobe the first address is lib_work's first instruction, in the library
    assert at_entry[0] == SourceFrame("lib_work", lib_src, line_of(LIBRARY, "lib_work"),
                                      False, "libsrcl.so"), at_entry
    assert main in at_entry, at_entry


# --- addresses the program printed --------------------------------------------------------------

@needs_symbolizer
def test_cxx_function_comes_out_demangled_with_its_line(tmp_path, fresh_symbolizer):
    src, exe = tmp_path / "leaky.cpp", tmp_path / "leaky"
    src.write_text(CXX_PROGRAM)
    subprocess.run(["g++", *FLAGS, "-o", str(exe), str(src)], check=True)
    child = Child([str(exe)])
    try:
        [[frame]] = user_source_frames(child.pid, child.addresses)
    finally:
        child.stop()
    assert frame == SourceFrame("leaky::Pool::grab(int)", str(src), line_of(CXX_PROGRAM, "grab"), False, "leaky")
    assert str(frame) == f"leaky::Pool::grab(int) (leaky.cpp:{line_of(CXX_PROGRAM, 'grab')}) [leaky]"


def test_without_debug_info_names_come_from_the_symbol_table(tmp_path, fresh_symbolizer):
    _, exe = _build(tmp_path, strip_debug=True)
    child = Child([str(exe)])
    try:
        frames = user_source_frames(child.pid, child.addresses)
    finally:
        child.stop()
    assert frames == [[SourceFrame("leak_here", None, None, False, "srcl")],
                      [SourceFrame("lib_work", None, None, False, "libsrcl.so")]]


@pytest.mark.parametrize("how", ["missing", "disabled"])
def test_without_llvm_symbolizer_names_come_from_the_symbol_table(program, monkeypatch, how):
    child, _, _ = program
    if how == "missing":
        monkeypatch.setattr(srclines, "find_llvm_symbolizer", lambda: "/nonexistent/llvm-symbolizer")
    else:
        monkeypatch.setenv(srclines.SYMBOLIZER_ENV, "none")
    srclines.reset_llvm_symbolizer()
    try:
        frames = user_source_frames(child.pid, child.addresses)
        tool = srclines.llvm_symbolizer()
    finally:
        srclines.reset_llvm_symbolizer()
    assert frames == [[SourceFrame("leak_here", None, None, False, "srcl")],
                      [SourceFrame("lib_work", None, None, False, "libsrcl.so")]]
    if how == "missing":
        assert tool.problem and "/nonexistent/llvm-symbolizer" in tool.problem
    else:
        assert tool is None


@needs_symbolizer
@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/map_files needs root")
def test_deleted_binary_still_resolves_through_proc(program, fresh_symbolizer):
    child, _, exe = program
    exe.unlink()
    with open(f"/proc/{child.pid}/maps") as f:
        assert f"{exe} (deleted)" in f.read()
    [[frame], _] = user_source_frames(child.pid, child.addresses)
    assert (frame.function, os.path.basename(frame.file), frame.module) == ("leak_here", "srcl.c", "srcl")


@needs_symbolizer
def test_exited_process_resolves_through_the_maps_read_before(program, fresh_symbolizer):
    child, _, exe = program
    symbolizer = Symbolizer()
    symbolizer.remember(child.pid)
    child.stop()
    [[frame], [lib_frame]] = user_source_frames(child.pid, child.addresses, symbolizer=symbolizer)
    assert (frame.function, os.path.basename(frame.file), frame.module) == ("leak_here", "srcl.c", "srcl")
    assert (lib_frame.function, lib_frame.module) == ("lib_work", "libsrcl.so")
    # the files gone too: the module is still known, nothing raises
    exe.unlink()
    srclines.reset_llvm_symbolizer()
    [[frame], _] = user_source_frames(child.pid, child.addresses, symbolizer=symbolizer)
    assert frame.module == "srcl" and frame.file is None


def test_unknown_pid_and_unmapped_addresses_are_unknown(program, fresh_symbolizer):
    child, _, _ = program
    assert user_source_frames(child.pid, [8]) == [[SourceFrame(UNKNOWN, None, None, False, "")]]
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert user_source_frames(gone.pid, [child.addresses[0]]) == [[SourceFrame(UNKNOWN, None, None, False, "")]]


@needs_symbolizer
def test_answers_are_cached_per_file_and_address(program, fresh_symbolizer):
    child, _, _ = program
    first = user_source_frames(child.pid, child.addresses)
    started = time.perf_counter()
    again = user_source_frames(child.pid, child.addresses * 50)
    assert again == first * 50
    assert time.perf_counter() - started < 0.5
    assert len(srclines._answers) == 2


@needs_symbolizer
def test_several_stacks_resolve_in_one_exchange(program, fresh_symbolizer, monkeypatch):
    child, _, _ = program
    [leak], [lib] = user_source_frames(child.pid, child.addresses)
    srclines.reset_llvm_symbolizer()
    tool = srclines.llvm_symbolizer()
    batches = []
    real = tool.symbolize
    monkeypatch.setattr(tool, "symbolize", lambda requests: batches.append(len(requests)) or real(requests))
    leak_at, lib_at = child.addresses
    stacks = user_source_stacks(child.pid, [[lib_at], [lib_at, leak_at + 1]])  # leak_at + 1 - 1: its entry
    assert stacks == [[lib], [lib, leak]]
    assert batches == [2]  # both files asked once, together

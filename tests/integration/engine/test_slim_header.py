"""The per-program slim vmlinux.h: same code as the full header, found types work, and the
two ways out when it falls short (retry with what clang names, then the full header)."""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys

import pytest

import ebpfkit.engine as engine
from ebpfkit.engine import slimheader
from ebpfkit.engine.btf import find_kernel_btf
from ebpfkit.engine.compiler import Compiler, Source
from ebpfkit.engine.prebuilt import program_sources
from ebpfkit.errors import CompileError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

# nsproxy and uts_namespace are never spelled: they are reached through members the
# program names (task->nsproxy->uts_ns->name.nodename)
NODENAME = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
const volatile int targ_tgid = 0;
char nodename[65] = {};
SEC("tp/syscalls/sys_enter_getppid")
int read_nodename(void *ctx)
{
    struct task_struct *task = (void *)bpf_get_current_task();
    if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
        return 0;
    BPF_CORE_READ_STR_INTO(&nodename, task, nsproxy, uts_ns, name.nodename);
    return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture
def messages(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    caplog.set_level(logging.DEBUG, logger="ebpfkit.engine.compiler")
    return lambda: [r.getMessage() for r in caplog.records]


def nodename_seen_by(spec) -> str:
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        obj.attach()
        os.getppid()
        return obj.bss["nodename"]


def test_types_reached_only_through_members_are_in_the_slim_header(messages):
    spec = engine.compile(text=NODENAME, name="nodename.bpf.c")
    assert any("nodename.bpf.c: slim vmlinux.h with" in m for m in messages()), messages()
    assert not any("fell short" in m for m in messages())
    assert nodename_seen_by(spec) == socket.gethostname()


def test_btf_read_whole_where_it_cannot_be_mapped(messages, monkeypatch):
    """Kernels before 6.16 refuse to map sysfs BTF: the bytes are read instead, with the
    same checksum (the cache key), and a cold compile works from them."""
    from ebpfkit.engine import btf

    with btf.BTFBytes(btf.KERNEL_BTF) as first:
        checksum, mapped = first.checksum(), first._unmap is not None
    with monkeypatch.context() as patch:
        patch.setattr(btf, "map_readonly", lambda fd, size: None)
        with btf.BTFBytes(btf.KERNEL_BTF) as read:
            assert read._unmap is None and read.is_raw_btf()
            assert read.checksum() == checksum, f"mapped first: {mapped}"
        spec = engine.compile(text=NODENAME, name="nodename.bpf.c")
    assert any("nodename.bpf.c: slim vmlinux.h with" in m for m in messages()), messages()
    assert nodename_seen_by(spec) == socket.gethostname()


def native_index():
    try:
        from ebpfkit.engine import _btfnames
    except ImportError:
        pytest.skip("ebpfkit.engine._btfnames was not built (no C compiler when ebpfkit was installed)")
    return _btfnames


def test_the_name_index_in_c_is_the_python_walks(tmp_path, monkeypatch):
    """The C walk (built at install) and the Python one give the same index of this kernel's
    BTF, and it agrees with libbpf's own lookups."""
    native = native_index()
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    with slimheader.KernelTypes(find_kernel_btf()) as types:
        in_c = native.index(types.words.cast("B"), types.strings)
        assert in_c == slimheader._walk(types.words, bytes(types.strings))
        assert types.names == in_c  # what a cold compile used
        for name, kind in [(b"task_struct", 4), (b"sk_buff", 4), (b"bpf_map_type", 6), (b"u32", 8)]:
            assert types.find(name, kind) in types.ids(name), name
        # an enumerator stands for its enum
        assert types.ids(b"BPF_MAP_TYPE_HASH") == types.ids(b"bpf_map_type")
    assert len(in_c) > 10000


def test_a_cold_compile_where_the_c_walk_was_not_built(messages, monkeypatch):
    real_walk = slimheader._walk
    monkeypatch.setitem(sys.modules, "ebpfkit.engine._btfnames", None)  # import fails
    monkeypatch.delattr(engine, "_btfnames", raising=False)  # (set by an earlier import)
    walked = []
    monkeypatch.setattr(slimheader, "_walk", lambda *args: walked.append(1) or real_walk(*args))
    spec = engine.compile(text=NODENAME, name="nodename.bpf.c")
    assert any("nodename.bpf.c: slim vmlinux.h with" in m for m in messages()), messages()
    assert walked == [1]  # the Python walk built the index
    assert nodename_seen_by(spec) == socket.gethostname()


def test_the_name_index_in_c_refuses_malformed_btf():
    native = native_index()
    struct_a = struct.pack("=III", 1, 4 << 24, 8)  # struct "a", no members, 8 bytes
    assert native.index(struct_a, b"\0a\0") == {b"a": 1}
    with pytest.raises(ValueError, match="runs past"):  # says it has a member, has none
        native.index(struct.pack("=III", 1, 4 << 24 | 1, 8), b"\0a\0")
    with pytest.raises(ValueError, match="past the string section"):
        native.index(struct_a, b"\0")
    with pytest.raises(ValueError, match="not terminated"):
        native.index(struct_a, b"\0a")
    with pytest.raises(ValueError, match="whole, aligned words"):
        native.index(struct_a[:-1], b"\0a\0")


def names_without(name: bytes):
    real = slimheader.program_names

    def program_names(*args):
        names = real(*args)
        return names._replace(spelled=names.spelled - {name})
    return program_names


def test_a_type_clang_reports_missing_is_added_and_compiled_again(messages, monkeypatch):
    # as if the program had not named the member: clang then reports struct nsproxy incomplete
    monkeypatch.setattr(slimheader, "program_names", names_without(b"nsproxy"))
    spec = engine.compile(text=NODENAME, name="nodename.bpf.c")
    log = messages()
    assert any("lacked nsproxy" in m for m in log), log
    assert any("nodename.bpf.c: slim vmlinux.h with" in m for m in log), log
    assert nodename_seen_by(spec) == socket.gethostname()


# task_struct is never spelled: bpf_helper_defs.h only declares it, so the slim header leaves
# it out until clang reports it incomplete
CURRENT_TASK = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
const volatile int targ_tgid = 0;
int seen_tgid = 0;
SEC("tp_btf/sys_enter")
int BPF_PROG(on_enter, struct pt_regs *regs, long id)
{
    if (bpf_get_current_task_btf()->tgid == targ_tgid)
        seen_tgid = targ_tgid;
    return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_a_struct_only_the_helper_prototypes_name_is_added_when_used(messages):
    spec = engine.compile(text=CURRENT_TASK, name="current_task.bpf.c")
    log = messages()
    assert any("lacked task_struct" in m for m in log), log
    assert any("current_task.bpf.c: slim vmlinux.h with" in m for m in log), log
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        obj.attach()
        os.getppid()
        assert obj.bss["seen_tgid"] == os.getpid()


def test_the_full_header_is_the_last_resort(messages, monkeypatch):
    monkeypatch.setattr(slimheader, "program_names", names_without(b"nsproxy"))
    monkeypatch.setattr(slimheader, "missing_names", lambda stderr: set())
    spec = engine.compile(text=NODENAME, name="nodename.bpf.c")
    assert any("nodename.bpf.c: the slim vmlinux.h fell short" in m for m in messages()), messages()
    assert nodename_seen_by(spec) == socket.gethostname()


def test_the_programs_own_error_comes_from_the_slim_compile(messages):
    broken = NODENAME.replace("return 0;\n}", "return no_such_thing;\n}")
    with pytest.raises(CompileError, match="undeclared identifier 'no_such_thing'") as exc:
        engine.compile(text=broken, name="broken.bpf.c")
    assert exc.value.diagnostics[0]["file"] == "broken.bpf.c"
    assert not any("fell short" in m for m in messages()), messages()


# struct io_kiocb holds function pointers whose prototypes take structs by value (on 6.18,
# io_tw_token_t, a typedef of struct io_tw_state): a slim header that declares those only
# forward gives the object a BTF the kernel rejects ("Invalid arg#2"), and libbpf then loads
# the program without BTF, or not at all (6.1: "missing btf func_info")
URING = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
__u64 completions = 0;
SEC("tp_btf/io_uring_complete")
int BPF_PROG(on_complete, void *ring, struct io_kiocb *req)
{
    if (BPF_CORE_READ(req, opcode) != 0xff)
        __sync_fetch_and_add(&completions, 1);
    return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_structs_passed_by_value_in_prototypes_are_defined(messages):
    spec = engine.compile(text=URING, name="uring.bpf.c")
    assert any("uring.bpf.c: slim vmlinux.h with" in m for m in messages()), messages()
    with spec.load() as obj:
        assert obj.programs["on_complete"].info().btf_id != 0, "the kernel refused the object's BTF"


def elf_sections(path) -> dict:
    """{name: bytes} of a little-endian ELF64 object's sections."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]
    out = {}
    for name_off, sh_type, _f, _a, offset, size, *_ in headers[1:]:
        start = names[4] + name_off
        name = data[start:data.index(b"\0", start)].decode()
        out[name] = b"" if sh_type == 8 else data[offset:offset + size]  # SHT_NOBITS: no bytes
    return out


SOURCES = {p.name: p for p in program_sources()}  # each tool keeps its own
SHIPPED = sorted(SOURCES)
assert SHIPPED, "no shipped programs found: the parametrized test below would test nothing"


@pytest.mark.parametrize("program", SHIPPED)
def test_slim_and_full_headers_give_the_same_code(program, tmp_path, monkeypatch):
    """Every shipped program: instructions, maps, relocations and symbols are identical;
    only the BTF differs (structs the program merely points to stay forward declarations)."""
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    btf = find_kernel_btf()
    source = Source.from_path(SOURCES[program])
    slim = elf_sections(Compiler(btf=btf, slim=True).compile(source))
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache-full"))
    full = elf_sections(Compiler(btf=btf, slim=False).compile(source))
    skip = lambda name: "BTF" in name or "debug" in name  # noqa: E731
    assert sorted(n for n in slim if not skip(n)) == sorted(n for n in full if not skip(n))
    differ = [n for n in slim if not skip(n) and slim[n] != full[n]]
    assert not differ, f"{program}: sections differ: {differ}"
    assert len(slim[".BTF"]) <= len(full[".BTF"])


def test_missing_names_reads_clang_diagnostics():
    stderr = "\n".join([
        "a.c:3:5: error: unknown type name 'u32'",
        "a.c:4:9: error: use of undeclared identifier 'BPF_NOEXIST'",
        "a.c:5:20: error: incomplete definition of type 'struct mm_struct'",
        "a.c:6:1: error: invalid application of 'sizeof' to an incomplete type 'struct file'",
        "a.c:7:1: error: expected ';' after expression",
    ])
    assert slimheader.missing_names(stderr) >= {"u32", "BPF_NOEXIST", "mm_struct", "file"}
    assert "expected" not in slimheader.missing_names(stderr)

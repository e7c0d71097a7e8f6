"""Tests of ebpfkit.engine.srclines without root or BPF: llvm-symbolizer's JSON answers, the
text of a frame, finding the binary, and the persistent process against stand-ins that hang,
die, answer out of step or are restarted (small shell scripts), plus kernel frames from a
fake kallsyms. Real programs and real stacks: tests/integration/engine/test_srclines.py."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from ebpfkit.engine import srclines
from ebpfkit.engine.compiler import llvm_tool_candidates
from ebpfkit.engine.srclines import (
    LlvmSymbolizer, SourceFrame, SymbolizerFailed, _Lines, _parse_answer, find_llvm_symbolizer,
    kernel_source_frames,
)
from ebpfkit.engine.symbols import KernelSymbols, StackTraces, Symbolizer

# what llvm-symbolizer 14 answers for an address inside an inlined function
INLINED = (b'{"Address":"0x1174","ModuleName":"/tmp/prog","Symbol":['
           b'{"Column":14,"Discriminator":0,"FileName":"/tmp/prog.c","FunctionName":"helper","Line":3,'
           b'"StartAddress":"","StartFileName":"/tmp/prog.c","StartLine":2},'
           b'{"Column":12,"Discriminator":0,"FileName":"/tmp/prog.c","FunctionName":"leak_here","Line":6,'
           b'"StartAddress":"0x1170","StartFileName":"","StartLine":5}]}')
SYMTAB_ONLY = (b'{"Address":"0x1174","ModuleName":"/tmp/prog","Symbol":[{"Column":0,"Discriminator":0,'
               b'"FileName":"","FunctionName":"leak_here","Line":0,"StartAddress":"0x1170","StartFileName":"",'
               b'"StartLine":0}]}')
NOTHING = (b'{"Address":"0x1174","ModuleName":"/tmp/prog","Symbol":[{"Column":0,"Discriminator":0,'
           b'"FileName":"","FunctionName":"","Line":0,"StartAddress":"","StartFileName":"","StartLine":0}]}')
NO_FILE = b'{"Address":"0x10","Error":{"Message":"No such file or directory"},"ModuleName":"/nonexist"}'


def test_answers_parse_into_frames_innermost_first():
    assert _parse_answer(INLINED, 0x1174) == [("helper", "/tmp/prog.c", 3), ("leak_here", "/tmp/prog.c", 6)]
    assert _parse_answer(SYMTAB_ONLY, 0x1174) == [("leak_here", None, None)]
    assert _parse_answer(NOTHING, 0x1174) == []
    assert _parse_answer(NO_FILE, 0x10) is None


@pytest.mark.parametrize("line", [b"not json", b"[1, 2]", b'{"Address": 5}'])
def test_garbage_answers_fail(line):
    with pytest.raises(SymbolizerFailed, match="unexpected answer"):
        _parse_answer(line, 0x1174)


def test_an_answer_for_another_address_is_out_of_step():
    with pytest.raises(SymbolizerFailed, match="out of step"):
        _parse_answer(INLINED, 0x1175)


def test_lines_are_assembled_from_chunks():
    lines = _Lines()
    for chunk in (b'{"a"', b':1}\n\n{"b":2}\n{"c"', b":3}"):
        lines.feed(chunk)
    assert lines.done == [b'{"a":1}', b'{"b":2}'] and len(lines) == 2
    lines.feed(b"\n")
    assert lines.done[-1] == b'{"c":3}'


@pytest.mark.parametrize("frame, text", [
    (SourceFrame("leak_here", "/src/leak.c", 12, False, "leak"), "leak_here (leak.c:12) [leak]"),
    (SourceFrame("helper", "x.c", 3, True, "prog"), "inlined: helper (x.c:3) [prog]"),
    (SourceFrame("malloc", None, None, False, "libc.so.6"), "malloc [libc.so.6]"),
    (SourceFrame("f", "/src/f.c", None, False, "m"), "f (f.c) [m]"),
    (SourceFrame("[unknown]", None, None, False, "[vdso]"), "[unknown] [[vdso]]"),
    (SourceFrame("[unknown]", None, None, False, ""), "[unknown]"),
])
def test_frame_text(frame, text):
    assert str(frame) == text


# --- finding llvm-symbolizer ---

def _fake_tool(directory, name: str, script: str = "exit 0") -> str:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_the_environment_chooses_or_disables_it(tmp_path, monkeypatch):
    fake = _fake_tool(tmp_path / "bin", "my-symbolizer")
    monkeypatch.setenv(srclines.SYMBOLIZER_ENV, fake)
    assert find_llvm_symbolizer() == fake
    monkeypatch.setenv(srclines.SYMBOLIZER_ENV, "none")
    assert find_llvm_symbolizer() is None
    monkeypatch.setenv(srclines.SYMBOLIZER_ENV, str(tmp_path / "missing"))
    assert find_llvm_symbolizer() is None  # a warning, not an error


def test_numbered_tools_are_found_newest_first(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    old = _fake_tool(bin_dir, "llvm-symbolizer-11")
    new = _fake_tool(bin_dir, "llvm-symbolizer-99")
    _fake_tool(bin_dir, "llvm-symbolizer-old")  # not a version: not a candidate
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    found = llvm_tool_candidates("llvm-symbolizer")
    assert found[0] == new and old in found
    assert not any(path.endswith("-old") for path in found)


@pytest.mark.skipif(not shutil.which("llvm-symbolizer"), reason="no llvm-symbolizer on this machine")
def test_default_lookup_finds_an_llvm_symbolizer(monkeypatch):
    monkeypatch.delenv(srclines.SYMBOLIZER_ENV, raising=False)
    found = find_llvm_symbolizer()
    assert found and os.path.basename(found).startswith("llvm-symbolizer") and os.access(found, os.X_OK)


# --- the persistent process, against stand-ins ---

# answers each "PATH" ADDR line as llvm-symbolizer would: one function "f" at f.c:3
ECHO = r'''while read -r path addr; do
  printf '{"Address":"%s","ModuleName":%s,"Symbol":[{"FunctionName":"f","FileName":"f.c","Line":3}]}\n' "$addr" "$path"
done'''
REQUEST = [("/bin/prog", (1, 2, 3, 4), 0x1174)]


def test_a_hanging_symbolizer_is_restarted_once_then_given_up(tmp_path):
    tool = LlvmSymbolizer(_fake_tool(tmp_path / "bin", "hang", "exec sleep 60"), timeout=0.3)
    started = time.monotonic()
    assert tool.symbolize(REQUEST) == [None]
    assert time.monotonic() - started < 3
    assert tool.problem and "no answer in 0.3 s" in tool.problem
    assert tool._failures == 2 and tool._proc is None  # killed, not left behind
    assert tool.symbolize(REQUEST) == [None]  # given up: answers at once
    assert time.monotonic() - started < 3


def test_a_dying_symbolizer_is_given_up(tmp_path):
    tool = LlvmSymbolizer(_fake_tool(tmp_path / "bin", "die", "exit 3"), timeout=5)
    assert tool.symbolize(REQUEST) == [None]
    assert "exited with 3" in tool.problem


def test_a_missing_symbolizer_is_given_up_at_once(tmp_path):
    tool = LlvmSymbolizer(str(tmp_path / "nothing"))
    assert tool.symbolize(REQUEST) == [None]
    assert tool._failures == 1 and str(tmp_path / "nothing") in tool.problem


def test_one_failure_restarts_and_answers(tmp_path):
    marker = tmp_path / "died-once"
    script = f'[ -e {marker} ] || {{ touch {marker}; exit 1; }}\n{ECHO}'
    tool = LlvmSymbolizer(_fake_tool(tmp_path / "bin", "flaky", script), timeout=5)
    try:
        assert tool.symbolize(REQUEST) == [[("f", "f.c", 3)]]
        assert tool.problem is None and tool._failures == 1
    finally:
        tool.close()


def test_out_of_step_answers_fail(tmp_path):
    script = r'''while read -r path addr; do echo '{"Address":"0x1","Symbol":[]}'; done'''
    tool = LlvmSymbolizer(_fake_tool(tmp_path / "bin", "confused", script), timeout=5)
    assert tool.symbolize(REQUEST) == [None]
    assert "out of step" in tool.problem


def test_a_replaced_file_gets_a_new_process(tmp_path):
    """llvm-symbolizer caches files by path, so a path naming another file needs a new one."""
    tool = LlvmSymbolizer(_fake_tool(tmp_path / "bin", "echo", ECHO), timeout=5)
    try:
        tool.symbolize(REQUEST)
        first = tool._proc.pid
        tool.symbolize(REQUEST)
        assert tool._proc.pid == first
        path, identity, vaddr = REQUEST[0]
        assert tool.symbolize([(path, identity[:3] + (99,), vaddr)]) == [[("f", "f.c", 3)]]
        assert tool._proc.pid != first
    finally:
        tool.close()
    assert tool._proc is None


@pytest.mark.skipif(not shutil.which("llvm-symbolizer"), reason="no llvm-symbolizer on this machine")
def test_a_large_batch_does_not_deadlock_on_full_pipes():
    """Both pipes fill up (requests in, answers out) long before 20000 requests are through."""
    tool = LlvmSymbolizer(shutil.which("llvm-symbolizer"), timeout=10)
    exe = os.path.realpath(shutil.which("true"))
    try:
        answers = tool.symbolize([(exe, (0,), 0x1000 + i) for i in range(20000)])
    finally:
        tool.close()
    assert len(answers) == 20000 and all(answer is not None for answer in answers)


# --- kernel frames and stack maps ---

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000800 T vfs_read
ffffffffc0001000 t mod_fn\t[ext4]
"""


def test_kernel_frames_name_function_and_module(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    kernel = KernelSymbols(str(path))
    assert kernel_source_frames([0xFFFFFFFF81000812, 0xFFFFFFFFC0001010], kernel=kernel) == [
        [SourceFrame("vfs_read", None, None, False, "kernel")],
        [SourceFrame("mod_fn", None, None, False, "ext4")],
    ]
    stacks = StackTraces({3: [0xFFFFFFFF81000812, 0xFFFFFFFFC0001010, 0]}, Symbolizer(kernel=kernel))
    assert [str(f) for f in stacks.source_frames(3)] == ["vfs_read [kernel]", "mod_fn [ext4]"]
    assert stacks.source_frames(3, kernel=False) == [srclines.UNKNOWN_FRAME] * 2  # no pid: nothing known
    assert stacks.source_frames(-14) == []

"""USDT probes through ebpfkit.bcc, as BCC's scripts use them: Debian's python3 declares SDT
probes (gc__start with the generation, import__find__load__start with the module's name),
each guarded by a semaphore. A child interpreter does what the test says (collections of
known generations, an import of a module named for this run); the program sees exactly that."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from ebpfkit.bcc import BPF, USDT
from ebpfkit.engine import usdt as notes
from ebpfkit.errors import EbpfkitError

PYTHON = os.path.realpath("/usr/bin/python3")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs"),
    pytest.mark.skipif(not notes.find("gc__start", "python", path=PYTHON),
                       reason=f"{PYTHON} has no SDT probes (Debian's python3 has)"),
]

GC_AND_IMPORTS = r"""
struct module_t { char name[48]; };
BPF_HISTOGRAM(generations, int, 8);
BPF_HASH(imports, struct module_t, u64);

int on_gc(struct pt_regs *ctx) {
    int generation = -1;
    bpf_usdt_readarg(1, ctx, &generation);
    generations.increment(generation);
    return 0;
}

int on_import(struct pt_regs *ctx) {
    struct module_t m = {};
    bpf_usdt_readarg_p(1, ctx, &m.name, sizeof(m.name));
    imports.increment(m);
    return 0;
}
"""

CHILD = """
import gc, sys
gc.disable()  # only the collections asked for below
sys.path.insert(0, sys.argv[1])
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
for generation, times in ((0, 2), (1, 3), (2, 5)):
    for _ in range(times):
        gc.collect(generation)
__import__(sys.argv[2])
sys.stdout.write("done\\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def semaphore(pid: int, probe: notes.UsdtProbe) -> int:
    with open(f"/proc/{pid}/mem", "rb") as mem:  # python3 is not PIE: the note's address is the one in memory
        mem.seek(probe.semaphore)
        return struct.unpack("H", mem.read(2))[0]


def test_a_python_process_gc_and_import_probes_report_what_it_did(tmp_path):
    module = f"ek_usdt_module_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text("")
    child = subprocess.Popen([PYTHON, "-c", CHILD, str(tmp_path), module], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"  # its interpreter mapped
        u = USDT(pid=child.pid)
        u.enable_probe(probe="gc__start", fn_name="on_gc")
        u.enable_probe(probe="python:import__find__load__start", fn_name="on_import")
        assert u.get_probe_arg_ctype("gc__start", 0) == "int32_t"
        gc_probe = notes.find("gc__start", "python", pid=child.pid)[0]
        assert semaphore(child.pid, gc_probe) == 0
        with BPF(text=GC_AND_IMPORTS, usdt_contexts=[u]) as b:
            assert b.num_open_uprobes() == 2 and semaphore(child.pid, gc_probe) == 1
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
            counts = {k.value: v.value for k, v in b["generations"].items() if v.value}
            assert counts == {0: 2, 1: 3, 2: 5}
            imported = {k.name: v.value for k, v in b["imports"].items()}
            assert imported.get(module.encode()) == 1, imported
        assert semaphore(child.pid, gc_probe) == 0  # detached: the interpreter stops firing it
    finally:
        child.kill()
        child.wait()


def test_probes_are_listed_and_a_missing_one_is_named():
    probes = {p.short_name(): p for p in USDT(path=PYTHON).enumerate_probes()}
    assert {"python:gc__start", "python:gc__done", "python:function__entry"} <= set(probes)
    assert probes["python:gc__start"].num_arguments == 1 and probes["python:gc__start"].bin_path == PYTHON.encode()
    with pytest.raises(EbpfkitError, match=f"USDT probe 'no__such__probe' is not in {PYTHON}"):
        USDT(path=PYTHON).enable_probe("no__such__probe", "f")
    with pytest.raises(EbpfkitError, match="give a process"):
        USDT()


def test_tplist_lists_a_binarys_usdt_probes():
    out = subprocess.run([sys.executable, "-m", "ebpfkit", "bcc", "run", "tplist", "-l", PYTHON],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{PYTHON} python:gc__start" in out.stdout.splitlines(), out.stdout

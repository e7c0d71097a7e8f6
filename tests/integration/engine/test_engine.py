"""The engine against the real kernel: every test loads real programs and checks what they
counted against what the test itself did (N syscalls, K children, M calls of a function)."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import textwrap
import time

import pytest

import ebpfkit.engine as engine
from ebpfkit.engine import inventory
from ebpfkit.engine.btftypes import EnumValue
from ebpfkit.engine.object import ObjectSpec
from ebpfkit.errors import AttachError, CompileError, LoadError, MapError, NotSupportedError, VerifierError
from ebpfkit.histogram import Log2Histogram
from helpers import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

PRELUDE = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
"""
LICENSE = '\nchar LICENSE[] SEC("license") = "GPL";\n'
GETPPID_NR = {"x86_64": 110, "aarch64": 173}


def compile_c(body: str, name: str = "t.bpf.c", **kw):
    return engine.compile(text=PRELUDE + textwrap.dedent(body) + LICENSE, name=name, **kw)


def getppid_n(n: int) -> None:
    # glibc does not cache getppid: each call is one syscall
    for _ in range(n):
        os.getppid()


# A program counting getppid() of one process in a .bss counter and in a map.
GETPPID_COUNTER = """
const volatile int targ_tgid = 0;
const volatile bool enabled = true;
const volatile u32 step = 1;
u64 hits = 0;
SEC("tp/syscalls/sys_enter_getppid")
int count_getppid(void *ctx)
{
    if (!enabled || (bpf_get_current_pid_tgid() >> 32) != targ_tgid)
        return 0;
    __sync_fetch_and_add(&hits, step);
    return 0;
}
"""


# --- hooks -----------------------------------------------------------------------------

def test_tracepoint_counts_own_getppid_calls():
    spec = compile_c(GETPPID_COUNTER)
    spec.rodata["targ_tgid"] = os.getpid()
    with spec.load() as obj:
        links = obj.attach()
        assert len(links) == 1
        getppid_n(37)
        assert obj.bss["hits"] == 37


def test_raw_tracepoint_filters_by_syscall_id():
    nr = GETPPID_NR.get(platform.machine())
    if nr is None:
        pytest.skip(f"getppid's syscall number on {platform.machine()} is not in this test")
    spec = compile_c("""
        const volatile int targ_tgid = 0;
        const volatile long targ_nr = 0;
        u64 hits = 0;
        SEC("raw_tp/sys_enter")
        int on_sys_enter(struct bpf_raw_tracepoint_args *ctx)
        {
            if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid || ctx->args[1] != targ_nr)
                return 0;
            __sync_fetch_and_add(&hits, 1);
            return 0;
        }
    """)
    with spec.load({"targ_tgid": os.getpid(), "targ_nr": nr}) as obj:
        obj.attach()
        getppid_n(23)
        os.getpid()  # other syscalls of ours must not count
        assert obj.bss["hits"] == 23


def test_a_raw_tracepoint_program_reading_past_its_arguments_is_refused_with_their_count():
    """sys_enter passes 2 arguments (regs, id): a program written for a signature with more is
    refused at attach, and the error says how many this kernel's passes."""
    spec = compile_c("""
        u64 seen = 0;
        SEC("raw_tp/sys_enter")
        int reads_a_third(struct bpf_raw_tracepoint_args *ctx)
        {
            seen = ctx->args[2];
            return 0;
        }
    """)
    with spec.load() as obj:
        with pytest.raises(AttachError, match=r"sys_enter passes 2 arguments here \(ctx->args\[0\.\.1\]\); a "
                                              r"program reading further was written for another kernel"):
            obj.attach()


def test_an_fentry_on_a_function_the_kernels_btf_lacks_names_it():
    """libbpf looks the function up in the kernel's BTF before any load: one that is not there
    (inlined, renamed) is named as such, not reported as BTF missing."""
    spec = compile_c("""
        SEC("fentry/ebpfkit_no_such_function")
        int BPF_PROG(on_nothing)
        {
            return 0;
        }
    """)
    with pytest.raises(NotSupportedError, match="ebpfkit_no_such_function is not a function in this kernel's BTF"):
        spec.load()


def test_tp_btf_counts_forks_and_execs_of_our_children():
    spec = compile_c("""
        const volatile int targ_tgid = 0;
        u64 forks = 0, execs = 0;
        SEC("tp_btf/sched_process_fork")
        int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
        {
            if (parent->tgid == targ_tgid)
                __sync_fetch_and_add(&forks, 1);
            return 0;
        }
        SEC("tp_btf/sched_process_exec")
        int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
        {
            if (BPF_CORE_READ(p, real_parent, tgid) == targ_tgid)
                __sync_fetch_and_add(&execs, 1);
            return 0;
        }
    """)
    k = 6
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        assert len(obj.attach()) == 2
        for _ in range(k):
            subprocess.run(["/bin/true"], check=True)
        assert obj.bss["forks"] == k
        assert obj.bss["execs"] == k


def test_uprobe_and_uretprobe_on_a_binary_built_here(tmp_path):
    src = tmp_path / "adder.c"
    src.write_text(textwrap.dedent("""
        #include <stdlib.h>
        __attribute__((noinline)) int add(int a, int b) { __asm__ volatile(""); return a + b; }
        int main(int argc, char **argv)
        {
            int n = atoi(argv[1]);
            volatile int sink = 0;
            for (int i = 0; i < n; i++)
                sink += add(i, 2 * i);
            return 0;
        }
    """))
    binary = tmp_path / "adder"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(src)], check=True)
    spec = compile_c("""
        u64 calls = 0, ret_sum = 0, arg_sum = 0;
        SEC("uprobe")
        int BPF_KPROBE(on_add, int a, int b)
        {
            __sync_fetch_and_add(&calls, 1);
            __sync_fetch_and_add(&arg_sum, a + b);
            return 0;
        }
        SEC("uretprobe")
        int BPF_KRETPROBE(on_add_ret, int ret)
        {
            __sync_fetch_and_add(&ret_sum, ret);
            return 0;
        }
    """)
    m = 500
    with spec.load() as obj:
        assert obj.attach() == []  # SEC("uprobe") names no target: nothing to auto-attach
        obj.programs["on_add"].attach_uprobe(str(binary), symbol="add")
        obj.programs["on_add_ret"].attach_uprobe(str(binary), symbol="add", retprobe=True)
        subprocess.run([str(binary), str(m)], check=True)
        expected = sum(3 * i for i in range(m))
        assert obj.bss["calls"] == m
        assert obj.bss["arg_sum"] == expected
        assert obj.bss["ret_sum"] == expected


def test_perf_event_sampling_sees_our_cpu_burn():
    spec = compile_c("""
        const volatile int targ_tgid = 0;
        u64 samples = 0;
        SEC("perf_event")
        int on_sample(struct bpf_perf_event_data *ctx)
        {
            if ((bpf_get_current_pid_tgid() >> 32) == targ_tgid)
                __sync_fetch_and_add(&samples, 1);
            return 0;
        }
    """)
    hz = 1000
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        cpu_started = time.process_time()
        group = obj.programs["on_sample"].attach_perf_event(frequency=hz)
        # burn 0.5 s of CPU (not wall) time, so a busy machine only makes it take longer
        deadline = time.monotonic() + 10
        while time.process_time() - cpu_started < 0.5 and time.monotonic() < deadline:
            pass
        group.close()
        cpu_used = time.process_time() - cpu_started
        samples = obj.bss["samples"]
    # cpu-clock samples whatever runs on the CPU: ours are about our CPU time * hz
    assert 100 < samples <= cpu_used * hz * 1.3 + 50, (samples, cpu_used)


# --- read-only config ------------------------------------------------------------------

def test_rodata_config_changes_what_the_program_counts():
    def run(**config):
        spec = compile_c(GETPPID_COUNTER)
        spec.rodata.update(config)
        with spec.load() as obj:
            obj.attach()
            getppid_n(10)
            return obj.bss["hits"]

    me = os.getpid()
    assert run(targ_tgid=me) == 10
    assert run(targ_tgid=me, step=3) == 30
    assert run(targ_tgid=me, enabled=False) == 0
    assert run(targ_tgid=1) == 0  # some other process


def test_rodata_is_readable_and_frozen_after_load():
    spec = compile_c(GETPPID_COUNTER)
    assert spec.rodata["step"] == 1 and spec.rodata["enabled"] is True
    spec.rodata["targ_tgid"] = 4242
    assert spec.rodata["targ_tgid"] == 4242
    with spec.load() as obj:
        with pytest.raises(LoadError, match="before load"):
            spec.rodata["targ_tgid"] = 1
        with pytest.raises(LoadError, match="before load"):
            obj.rodata["step"] = 2
        assert obj.rodata["targ_tgid"] == 4242


def test_unknown_rodata_name_lists_known_names():
    spec = compile_c(GETPPID_COUNTER)
    with pytest.raises(KeyError) as exc:
        spec.rodata["targ_pid"] = 1
    msg = str(exc.value)
    assert "targ_pid" in msg and "targ_tgid" in msg and "enabled" in msg and "step" in msg
    with pytest.raises(KeyError, match="targ_tgid"):
        spec.load({"no_such_var": 1})
    spec.close()


# --- maps ------------------------------------------------------------------------------

STRUCT_MAPS = """
/* names of their own: vmlinux.h already has struct key and enum state */
enum ek_state { EK_IDLE = 0, EK_RUNNING = 1, EK_DONE = 7 };
struct ek_key { u32 pid; char comm[16]; };
struct ek_val { u64 count; u64 bytes; enum ek_state st; };
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, struct ek_key);
    __type(value, struct ek_val);
} stats SEC(".maps");
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 4);
    __type(key, u32);
    __type(value, struct ek_val);
} out SEC(".maps");
const volatile int targ_tgid = 0;

SEC("tp/syscalls/sys_enter_getppid")
int copy_value(void *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (tgid != targ_tgid)
        return 0;
    /* read what Python stored under {42, "hello"} and copy it to out[0] */
    struct ek_key k = {.pid = 42};
    __builtin_memcpy(k.comm, "hello", 6);
    u32 zero = 0;
    struct ek_val *v = bpf_map_lookup_elem(&stats, &k);
    if (v)
        bpf_map_update_elem(&out, &zero, v, BPF_ANY);
    /* and count our own calls under {tgid, comm} */
    struct ek_key mine = {.pid = tgid};
    bpf_get_current_comm(mine.comm, sizeof(mine.comm));
    struct ek_val *m = bpf_map_lookup_elem(&stats, &mine);
    if (m) {
        m->count++;
        m->bytes += 100;
    } else {
        struct ek_val init = {.count = 1, .bytes = 100, .st = EK_DONE};
        bpf_map_update_elem(&stats, &mine, &init, BPF_NOEXIST);
    }
    return 0;
}
"""


@pytest.fixture
def struct_obj():
    spec = compile_c(STRUCT_MAPS, name="structs.bpf.c")
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        yield obj


def test_hash_map_struct_crud_both_ways(struct_obj):
    stats, out = struct_obj.maps["stats"], struct_obj.maps["out"]
    key = {"pid": 42, "comm": "hello"}
    stats[key] = {"count": 7, "bytes": 1234, "st": "EK_RUNNING"}
    got = stats[key]
    assert got == {"count": 7, "bytes": 1234, "st": 1}
    assert isinstance(got.st, EnumValue) and got.st.name == "EK_RUNNING" and got.count == 7

    struct_obj.attach()
    getppid_n(5)
    # the BPF side saw what Python wrote ...
    assert out[0] == {"count": 7, "bytes": 1234, "st": 1}
    # ... and Python sees what the BPF side wrote
    comm = open("/proc/self/comm").read().strip()[:15]
    mine = stats[{"pid": os.getpid(), "comm": comm}]
    assert mine == {"count": 5, "bytes": 500, "st": 7} and str(mine.st) == "EK_DONE"
    assert len(stats) == 2

    del stats[key]
    with pytest.raises(KeyError):
        stats[key]
    with pytest.raises(KeyError):
        del stats[key]
    assert len(stats) == 1
    with pytest.raises(MapError, match="unknown enumerator"):
        stats[key] = {"count": 1, "st": "EK_BOGUS"}


def test_hash_map_items_batch_equals_iteration_pop_all_and_clear(struct_obj):
    stats = struct_obj.maps["stats"]
    for i in range(300):  # more than one batch chunk
        stats[{"pid": i, "comm": f"c{i}"}] = {"count": i, "bytes": i * 10, "st": i % 2}
    items = stats.items()
    assert stats._batch_ok is True  # the batch syscall was really used
    by_iteration = [(k, stats[k]) for k in stats]
    order = lambda kv: kv[0]["pid"]  # noqa: E731
    assert sorted(items, key=order) == sorted(by_iteration, key=order)
    assert len(items) == 300
    assert {k["pid"]: (k["comm"], v["bytes"]) for k, v in items} == {
        i: (f"c{i}", i * 10) for i in range(300)}

    df = stats.to_dataframe()
    assert len(df) == 300 and set(df.columns) >= {"pid", "comm", "count", "bytes", "st"}
    assert df["bytes"].sum() == sum(i * 10 for i in range(300))

    popped = stats.pop_all()
    assert sorted(popped, key=order) == sorted(items, key=order)
    assert len(stats) == 0 and stats.items() == []

    for i in range(10):
        stats[{"pid": i, "comm": "x"}] = {"count": 1}
    assert len(stats) == 10
    stats.clear()
    assert len(stats) == 0


def test_array_map_semantics(struct_obj):
    out = struct_obj.maps["out"]
    assert len(out) == out.max_entries == 4
    assert out[3] == {"count": 0, "bytes": 0, "st": 0}
    out[3] = {"count": 9}
    assert out[3].count == 9
    assert sorted(k for k in out) == [0, 1, 2, 3]
    with pytest.raises(MapError, match="cannot be deleted"):
        del out[3]
    with pytest.raises(KeyError):
        out[4]
    with pytest.raises(MapError):
        out[4] = {"count": 1}
    out.clear()
    assert out[3].count == 0 and len(out.items()) == 4


def test_percpu_array_values_per_cpu_and_sum():
    spec = compile_c("""
        const volatile int targ_tgid = 0;
        struct {
            __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
            __uint(max_entries, 2);
            __type(key, u32);
            __type(value, u64);
        } pcpu SEC(".maps");
        SEC("tp/syscalls/sys_enter_getppid")
        int per_cpu(void *ctx)
        {
            if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
                return 0;
            u32 zero = 0, one = 1;
            u64 *v = bpf_map_lookup_elem(&pcpu, &zero);
            if (v)
                *v += 1; /* only this CPU's slot: no atomic needed */
            u64 *c = bpf_map_lookup_elem(&pcpu, &one);
            if (c)
                *c = bpf_get_smp_processor_id();
            return 0;
        }
    """)
    cpus = sorted(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        pcpu = obj.maps["pcpu"]
        obj.attach()
        try:
            for cpu in cpus:
                os.sched_setaffinity(0, {cpu})
                getppid_n(10 * (cpu + 1))
        finally:
            os.sched_setaffinity(0, saved)
        values = pcpu[0]
        assert len(values) == engine.maps.possible_cpu_count()
        for cpu, value in enumerate(values):
            assert value == (10 * (cpu + 1) if cpu in cpus else 0), values
        assert values.sum() == sum(10 * (c + 1) for c in cpus)
        assert all(pcpu[1][c] == c for c in cpus)  # each CPU wrote its own id
        pcpu[0] = 5  # a scalar sets every CPU's slot
        assert pcpu[0] == [5] * len(values) and pcpu[0].sum() == 5 * len(values)
        pcpu.clear()
        assert pcpu[0].sum() == 0


def test_max_entries_resize_and_100k_batch_read():
    spec = compile_c("""
        struct {
            __uint(type, BPF_MAP_TYPE_HASH);
            __uint(max_entries, 16);
            __type(key, u32);
            __type(value, u64);
        } big SEC(".maps");
        SEC("tp/syscalls/sys_enter_getppid")
        int touch(void *ctx) { u32 k = 0; bpf_map_lookup_elem(&big, &k); return 0; }
    """)
    n = 100_000
    spec.maps["big"].max_entries = n
    with spec.load() as obj:
        big = obj.maps["big"]
        assert big.max_entries == n
        with pytest.raises(MapError, match="only before load"):
            big.max_entries = 10
        for i in range(n):
            big[i] = i * 3 + 1
        with pytest.raises(MapError):  # full: the resize really happened at n
            big[n] = 0
        items = big.items()
        assert len(items) == n
        assert dict(items) == {i: i * 3 + 1 for i in range(n)}


def test_head_reads_the_first_slots_of_an_array_only():
    spec = compile_c("""
        struct {
            __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
            __uint(max_entries, 70000);
            __type(key, u32);
            __type(value, u64);
        } slots SEC(".maps");
        SEC("tp/syscalls/sys_enter_getppid")
        int touch(void *ctx) { u32 k = 0; bpf_map_lookup_elem(&slots, &k); return 0; }
    """)
    with spec.load() as obj:
        slots = obj.maps["slots"]
        slots.update_many([(i, i * 7) for i in range(5000)])
        head = slots.head(5001)  # more than one batch, fewer than the array holds
        assert [k for k, _ in head] == list(range(5001))
        assert [v.sum() for _, v in head] == [i * 7 * len(head[0][1]) for i in range(5000)] + [0]
        assert slots.head(3) == slots.items()[:3]


def test_bss_and_data_globals_are_live():
    spec = compile_c("""
        const volatile int targ_tgid = 0;
        u64 counter = 0;
        u64 increment = 1;  /* .data: written from Python while attached */
        SEC("tp/syscalls/sys_enter_getppid")
        int live(void *ctx)
        {
            if ((bpf_get_current_pid_tgid() >> 32) == targ_tgid)
                __sync_fetch_and_add(&counter, increment);
            return 0;
        }
    """)
    with spec.load({"targ_tgid": os.getpid()}) as obj:
        obj.attach()
        assert obj.bss["counter"] == 0
        getppid_n(4)
        assert obj.bss["counter"] == 4
        obj.data["increment"] = 100
        getppid_n(2)
        assert obj.bss["counter"] == 204
        obj.bss["counter"] = 0
        getppid_n(1)
        assert obj.bss.to_dict() == {"counter": 100}
        with pytest.raises(KeyError, match="counter"):
            obj.bss["nope"]


# --- histograms ------------------------------------------------------------------------

HIST = """
const volatile int targ_tgid = 0;
u64 inject = 0;
struct hist { u32 slots[EK_MAX_SLOTS]; };
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, EK_MAX_SLOTS);
    __type(key, u32);
    __type(value, u64);
} hist SEC(".maps");
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4);
    __type(key, u32);
    __type(value, struct hist);
} hists SEC(".maps");
struct hist zero_hist = {};

SEC("tp/syscalls/sys_enter_getppid")
int record(void *ctx)
{
    if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
        return 0;
    u32 slot = ek_hist_slot(inject, EK_MAX_SLOTS);
    u64 *c = bpf_map_lookup_elem(&hist, &slot);
    if (c)
        __sync_fetch_and_add(c, 1);
    u32 key = 7;
    struct hist *h = bpf_map_lookup_elem(&hists, &key);
    if (!h) {
        bpf_map_update_elem(&hists, &key, &zero_hist, BPF_NOEXIST);
        h = bpf_map_lookup_elem(&hists, &key);
    }
    if (h && slot < EK_MAX_SLOTS)
        __sync_fetch_and_add(&h->slots[slot], 1);
    return 0;
}
"""


def test_log2_histogram_matches_injected_values():
    values = [0, 1, 2, 3, 5, 100, 1000, 1000, 1023, 1024, 1 << 20, (1 << 31) + 5]
    expected = Log2Histogram(unit="usecs")
    for v in values:
        expected.add(v)
    with compile_c(HIST, name="hist.bpf.c").load({"targ_tgid": os.getpid()}) as obj:
        obj.attach()
        for v in values:
            obj.bss["inject"] = v
            os.getppid()
        hist = obj.maps["hist"].log2_histogram(unit="usecs")
        assert hist == expected
        assert hist.total == len(values)
        assert hist.counts[9] == 3 and hist.counts[10] == 1  # 1000, 1000, 1023 | 1024
        by_field = obj.maps["hists"].log2_histogram(unit="usecs", field="slots", key=7)
        assert by_field == expected

        obj.bss["inject"] = 1 << 40  # beyond the last slot: the program clamps it there
        os.getppid()
        assert obj.maps["hist"].log2_histogram().counts[31] == 2

        df = hist.to_dataframe()
        assert list(df.columns) == ["low", "high", "count"]
        assert df["count"].sum() == len(values)
        assert df.to_dict("records") == hist.buckets()
        assert df.iloc[0].to_dict() == {"low": 0, "high": 1, "count": 2}


def test_log2_histogram_from_values_written_by_python():
    with compile_c(HIST, name="hist.bpf.c").load() as obj:
        hist = obj.maps["hist"]
        injected = {0: 4, 3: 9, 12: 1}
        for slot, count in injected.items():
            hist[slot] = count
        h = hist.log2_histogram()
        assert h.counts[:13] == [4, 0, 0, 9] + [0] * 8 + [1] and h.total == 14
        assert [(b["low"], b["high"], b["count"]) for b in h.buckets()][0] == (0, 1, 4)
        assert h.bounds(12) == (4096, 8191)


# --- the compile cache -----------------------------------------------------------------

CACHED = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "myconfig.h"
#ifndef EK_TEST_EXTRA
#define EK_TEST_EXTRA 0
#endif
const volatile int magic = MAGIC;
const volatile int extra = EK_TEST_EXTRA;
SEC("tp/syscalls/sys_enter_getppid")
int cached(void *ctx) { return magic + extra; }
char LICENSE[] SEC("license") = "GPL";
"""


def test_compile_cache_hits_and_invalidation(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    caplog.set_level(logging.DEBUG, logger="ebpfkit.engine.compiler")
    src = tmp_path / "cached.bpf.c"
    src.write_text(CACHED)
    header = tmp_path / "myconfig.h"
    header.write_text("#define MAGIC 1\n")

    def compiled():
        records = [r.getMessage() for r in caplog.records]
        caplog.clear()
        if any(m.startswith("compiled cached.bpf.c") for m in records):
            return "compiled"
        if any(m.startswith("cache hit for cached.bpf.c") for m in records):
            return "hit"
        return records

    spec = engine.compile(src)
    assert compiled() == "compiled" and spec.rodata["magic"] == 1
    assert list((tmp_path / "cache" / "objects").glob("*.o"))

    real_run = subprocess.run

    def no_clang(cmd, *a, **kw):
        if "clang" in os.path.basename(str(cmd[0])):
            raise AssertionError(f"clang ran on a cache hit: {cmd[:3]}")
        return real_run(cmd, *a, **kw)

    with monkeypatch.context() as m:
        m.setattr(subprocess, "run", no_clang)  # the compiler imports subprocess only on a miss
        spec = engine.compile(src)
    assert compiled() == "hit" and spec.rodata["magic"] == 1

    time.sleep(0.01)  # a new mtime even on coarse timestamp clocks
    header.write_text("#define MAGIC 2\n")  # same size, new content
    spec = engine.compile(src)
    assert compiled() == "compiled" and spec.rodata["magic"] == 2
    spec = engine.compile(src)
    assert compiled() == "hit" and spec.rodata["magic"] == 2

    spec = engine.compile(src, cflags=["-DEK_TEST_EXTRA=5"])
    assert compiled() == "compiled" and spec.rodata["extra"] == 5
    spec = engine.compile(src, cflags=["-DEK_TEST_EXTRA=5"])
    assert compiled() == "hit" and spec.rodata["extra"] == 5
    spec = engine.compile(src)
    assert compiled() == "hit" and spec.rodata["extra"] == 0

    # the same program in another checkout, beside another header of the same name: its own object
    other = tmp_path / "other"
    other.mkdir()
    (other / "cached.bpf.c").write_text(CACHED)
    (other / "myconfig.h").write_text("#define MAGIC 3\n")
    spec = engine.compile(other / "cached.bpf.c")
    assert compiled() == "compiled" and spec.rodata["magic"] == 3
    assert engine.compile(src).rodata["magic"] == 2


# --- errors ----------------------------------------------------------------------------

BAD_VERIFIER = """
        struct {
            __uint(type, BPF_MAP_TYPE_HASH);
            __uint(max_entries, 8);
            __type(key, u32);
            __type(value, u64);
        } m SEC(".maps");
        SEC("tp/syscalls/sys_enter_getppid")
        int no_null_check(void *ctx)
        {
            u32 k = 0;
            u64 *v = bpf_map_lookup_elem(&m, &k);
            *v += 1;
            return 0;
        }
"""


def test_verifier_rejection_is_a_short_summary_with_the_full_log():
    spec = compile_c(BAD_VERIFIER, name="bad_verifier.bpf.c")
    with pytest.raises(VerifierError) as exc:
        spec.load()
    err = exc.value
    msg = str(err)
    assert len(msg.splitlines()) <= 2, msg
    assert "no_null_check" in msg
    assert "map_value_or_null" in msg or "invalid mem access" in msg, msg
    # it points at the user's line, by the name the source was given
    lines = (PRELUDE + textwrap.dedent(BAD_VERIFIER)).splitlines()
    bad_line = next(i for i, ln in enumerate(lines, 1) if "*v += 1" in ln)
    assert "*v += 1" in msg and f"bad_verifier.bpf.c:{bad_line}" in msg, msg
    assert err.program == "no_null_check"
    assert len(err.log.splitlines()) >= 5 and "map_value_or_null" in err.log
    assert err.hint


def test_compile_error_points_at_file_line_and_source():
    body = "\n".join([
        "SEC(\"tp/syscalls/sys_enter_getppid\")",
        "int broken(void *ctx)",
        "{",
        "    int x = no_such_variable + 1;",
        "    return x;",
        "}",
    ])
    text = PRELUDE + body + LICENSE
    lines = text.splitlines()
    bad = next(i for i, ln in enumerate(lines, 1) if "no_such_variable" in ln)
    col = lines[bad - 1].index("no_such_variable") + 1
    with pytest.raises(CompileError) as exc:
        engine.compile(text=text, name="broken.bpf.c")
    msg = str(exc.value)
    assert f"broken.bpf.c:{bad}:{col}" in msg, msg
    assert "int x = no_such_variable + 1;" in msg
    assert "use of undeclared identifier 'no_such_variable'" in msg
    diag = exc.value.diagnostics[0]
    assert (diag["file"], diag["line"], diag["col"], diag["severity"]) == ("broken.bpf.c", bad, col, "error")


def test_an_object_libbpf_cannot_open_is_explained_by_libbpf(tmp_path):
    """libbpf is not listened to while it opens (hundreds of debug lines cost a start ~5 ms): a
    failure opens it again, listening, so the error still carries libbpf's own reason."""
    source = tmp_path / "host.c"
    source.write_text("int f(int x) { return x + 1; }\n")
    host_object = tmp_path / "host.o"
    subprocess.run(["gcc", "-c", "-o", str(host_object), str(source)], check=True)
    with pytest.raises(LoadError) as exc:
        ObjectSpec(host_object)
    msg = str(exc.value)
    assert f"cannot open BPF object {host_object}" in msg, msg
    assert "not a valid eBPF object" in msg, msg


def test_fentry_load_refused_by_this_host_raises_not_supported():
    """The host kernel locks function trampolines (kernel-facts.md); the VM tests check that
    fentry really works. Here: the refusal must be a NotSupportedError naming the program;
    on a kernel that loads it (most distributions'), the feature probe must say so too."""
    spec = compile_c("""
        u64 calls = 0;
        SEC("fentry/do_nanosleep")
        int BPF_PROG(on_nanosleep)
        {
            __sync_fetch_and_add(&calls, 1);
            return 0;
        }
    """, name="fentry_host.bpf.c")
    try:
        obj = spec.load()
    except NotSupportedError as exc:
        msg = str(exc)
        assert "on_nanosleep" in msg and "fentry/do_nanosleep" in msg, msg
        assert exc.feature == "fentry"
        assert exc.hint
        assert not isinstance(exc, OSError)
    else:
        obj.close()
        from ebpfkit.engine import features

        assert features.probe("fentry").supported, features.probe("fentry").reason


def test_kernel_program_ids_are_gone_after_close():
    spec = compile_c(GETPPID_COUNTER)
    obj = spec.load({"targ_tgid": os.getpid()})
    obj.attach()
    prog_id = obj.programs["count_getppid"].info().id
    assert prog_id > 0
    obj.close()
    obj.close()  # twice is fine
    assert wait_for(lambda: inventory.program(prog_id) is None), f"program {prog_id} is still loaded"

"""sysinfo.memory reads /proc/meminfo, slabinfo and vmallocinfo as the kernel writes them
(here, files in that format), and memleak's triage compares two readings."""

from __future__ import annotations

from ebpfkit.sysinfo import memory
from ebpfkit.tools.memleak import triage

MEMINFO = """MemTotal:       24683656 kB
MemFree:        21629024 kB
Slab:             598416 kB
SReclaimable:     550088 kB
SUnreclaim:        48328 kB
HugePages_Total:       0
"""
SLABINFO = """slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>
filp                2048   2100    256   16    1 : tunables    0    0    0 : slabdata    131    131      0
kmalloc-1k           100    128   1024   16    4 : tunables    0    0    0 : slabdata      8      8      0
"""
VMALLOCINFO = """0x00000000a4afec43-0x00000000859dbdd5   20480 irq_init_percpu_irqstack+0xed/0x120 vmap
0x0000000081cf8c69-0x00000000512bc9b0 2097152 pcpu_get_vm_areas+0x0/0x1050 vmalloc
0x000000008b8378f4-0x00000000521017cd   20480 kernel_clone+0xb8/0x400 pages=4 vmalloc N0=4
0x000000008b8378f4-0x00000000521017cd   16384 kernel_clone+0xb8/0x400 pages=3 vmalloc N0=3
0x000000008b8378f4-0x00000000521017cd    8192 unpurged vm_area
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_meminfo_in_bytes(tmp_path):
    values = memory.meminfo(write(tmp_path, "meminfo", MEMINFO))
    assert values["SUnreclaim"] == 48328 * 1024
    assert values["HugePages_Total"] == 0  # a count, not kB


def test_slab_bytes_are_active_objects_times_their_size(tmp_path):
    assert memory.slab_bytes(write(tmp_path, "slabinfo", SLABINFO)) == {"filp": 2048 * 256, "kmalloc-1k": 100 * 1024}


def test_vmalloc_bytes_by_caller(tmp_path):
    assert memory.vmalloc_bytes(write(tmp_path, "vmallocinfo", VMALLOCINFO)) == {
        "irq_init_percpu_irqstack": 20480, "pcpu_get_vm_areas": 2097152, "kernel_clone": 36864, "[no caller]": 8192}


def test_unreadable_files_are_none(tmp_path):
    assert memory.slab_bytes(str(tmp_path / "absent")) is None
    assert memory.vmalloc_bytes(str(tmp_path / "absent")) is None


def test_triage_points_at_the_area_that_grew_most():
    before = triage.Snapshot({"AnonPages": 100, "SUnreclaim": 1000, "VmallocUsed": 50}, {"filp": 10, "dentry": 5},
                             {"kernel_clone": 100})
    after = triage.Snapshot({"AnonPages": 90, "SUnreclaim": 5000, "VmallocUsed": 60}, {"filp": 4010, "dentry": 5,
                                                                                         "new_cache": 7}, None)
    result = triage.compare(before, after, 2.0)
    assert [(a.area, a.delta) for a in result.areas] == [("SUnreclaim", 4000), ("VmallocUsed", 10),
                                                          ("AnonPages", -10)]
    assert result.look_first.startswith("kernel slab allocations")
    assert result.slab_caches == [("filp", 4000), ("new_cache", 7)]  # only what grew
    assert result.vmalloc_callers == [] and result.unreadable == [memory.VMALLOCINFO]


def test_triage_says_when_nothing_grew():
    same = triage.Snapshot({"AnonPages": 100, "SUnreclaim": 1000}, {}, {})
    assert triage.compare(same, same, 1.0).look_first is None

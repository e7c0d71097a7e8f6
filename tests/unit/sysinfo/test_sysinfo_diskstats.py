"""/proc/diskstats parsing and iostat's arithmetic, checked on hand-computed examples."""

import pytest

from ebpfkit.sysinfo.devices import device_name, resolve_disk, whole_disks
from ebpfkit.sysinfo.diskstats import DiskCounters, disk_rates, parse_diskstats, read_diskstats

TEXT = """\
   8       0 sda 1000 10 80000 4000 500 20 40000 2500 0 3000 6500 0 0 0 0 0 0
   8       1 sda1 900 10 70000 3600 500 20 40000 2500 0 2800 6100 0 0 0 0 0 0
 259       0 nvme0n1 7 0 56 1 2 0 16 3 1 4 5 6 0 48 2 9 1
   7       0 loop0 5 0 40 0 0 0 0 0 0 1 0
   1       0 ram0 1 2 3
"""


def test_parse_every_format():
    disks = parse_diskstats(TEXT)
    assert set(disks) == {"sda", "sda1", "nvme0n1", "loop0"}  # ram0: too few fields
    sda = disks["sda"]
    assert (sda.major, sda.minor, sda.reads, sda.sectors_read, sda.read_ms) == (8, 0, 1000, 80000, 4000)
    assert (sda.writes, sda.sectors_written, sda.write_ms, sda.io_ms) == (500, 40000, 2500, 3000)
    nvme = disks["nvme0n1"]  # 20 fields: discards and flushes
    assert (nvme.discards, nvme.sectors_discarded, nvme.discard_ms, nvme.flushes, nvme.flush_ms) == \
        (6, 48, 2, 9, 1)
    assert disks["loop0"].discards == 0  # 14-field line (kernels before 4.18)


def counters(**kw):
    return DiskCounters(8, 0, "sda", **kw)


def test_rates_as_iostat_computes_them():
    before = counters(reads=100, sectors_read=1000, read_ms=50, writes=10, sectors_written=800,
                      write_ms=100, io_ms=1000, discards=1, discard_ms=5)
    after = counters(reads=300, sectors_read=5000, read_ms=450, writes=60, sectors_written=10800,
                     write_ms=600, io_ms=1500, discards=1, discard_ms=5)
    r = disk_rates(before, after, 2.0)
    assert (r.reads, r.writes) == (200, 50)
    assert (r.read_bytes, r.write_bytes) == (4000 * 512, 10000 * 512)
    assert (r.r_iops, r.w_iops) == (100.0, 25.0)
    assert (r.r_bps, r.w_bps) == (4000 * 512 / 2, 10000 * 512 / 2)
    assert r.r_await == pytest.approx(400 / 200)
    assert r.w_await == pytest.approx(500 / 50)
    assert r.await_ms == pytest.approx((400 + 500) / 250)
    assert r.util == pytest.approx(500 / 2000 * 100)
    assert r.active


def test_idle_interval_and_saturation():
    idle = disk_rates(counters(reads=5), counters(reads=5), 1.0)
    assert (idle.r_iops, idle.await_ms, idle.r_await, idle.w_await, idle.util) == (0, 0, 0, 0, 0)
    assert not idle.active
    busy = disk_rates(counters(io_ms=0), counters(io_ms=1100), 1.0)  # rounding can pass 100%
    assert busy.util == 100.0


def test_counters_that_went_backwards_start_from_zero():
    r = disk_rates(counters(reads=1000, sectors_read=9000), counters(reads=7, sectors_read=56), 1.0)
    assert (r.reads, r.read_bytes) == (7, 56 * 512)


def test_zero_interval_is_an_error():
    with pytest.raises(ValueError):
        disk_rates(counters(), counters(), 0)


def test_this_machine():
    disks = read_diskstats()
    assert disks and all(d.reads >= 0 for d in disks.values())
    for name in whole_disks():
        if name in disks:
            d = disks[name]
            assert resolve_disk(name).disk == (d.major, d.minor)
            assert device_name((d.major, d.minor)) == name

"""Joining records into lifecycles, on hand-made recordings whose answer is known."""

from __future__ import annotations

import time

from ebpfkit.tools.iotrace.fileformat import BlockEvent, Device, Extent, FileMap, Recording, Syscall
from ebpfkit.tools.iotrace.join import _mapped, build_requests, join, op_of_rwbs, sector_ranges

DISK = "7:0"


def blk(ts, stage, sector, nr, rwbs="W", pid=10, dev=DISK):
    return BlockEvent(ts, stage, dev, sector, nr, rwbs, pid, pid, "app")


def sys_(enter, exit_, offset, nbytes, call="pwrite64", pid=10, ino=12, dev=DISK, file_type="reg"):
    return Syscall(enter, exit_, pid, pid, "app", call, 3, dev, ino, offset, nbytes, nbytes, True, file_type)


def lifecycle(ts, sector, nr, rwbs="W", insert=True):
    """queue, (insert), issue, complete of one request at ts, ts+10, ts+20, ts+100."""
    events = [blk(ts, "queue", sector, nr, rwbs)]
    if insert:
        events.append(blk(ts + 10, "insert", sector, nr, rwbs))
    return events + [blk(ts + 20, "issue", sector, nr, rwbs), blk(ts + 100, "complete", sector, nr, rwbs)]


def test_op_of_rwbs():
    assert [op_of_rwbs(r) for r in ("W", "WS", "FWFS", "RA", "RM", "D", "N", "F", "")] == \
        ["W", "W", "W", "R", "R", "D", "N", "F", "?"]


def test_one_request_all_stages():
    res = build_requests(lifecycle(1000, 64, 8))
    (rq,) = res.requests
    assert (rq.queue, rq.insert, rq.issue, rq.complete) == (1000, 1010, 1020, 1100)
    assert rq.bytes == 4096 and rq.op == "W" and rq.bios == 1 and rq.pid == 10
    assert res.incomplete == 0 and res.unmatched_bios == 0


def test_same_sector_reused_gives_separate_requests():
    res = build_requests(lifecycle(1000, 64, 8) + lifecycle(5000, 64, 8, insert=False))
    assert [(r.queue, r.insert, r.complete) for r in res.requests] == [(1000, 1010, 1100), (5000, None, 5100)]


def test_merged_bios_belong_to_one_request():
    events = [blk(100, "queue", 0, 8), blk(110, "queue", 8, 8), blk(120, "queue", 16, 8),
              blk(200, "insert", 0, 24), blk(300, "issue", 0, 24), blk(900, "complete", 0, 24)]
    (rq,) = build_requests(events).requests
    assert rq.bios == 3 and rq.queue == 100 and rq.bytes == 24 * 512


def test_split_bio_feeds_several_requests():
    """One 2048-sector bio split at 256 sectors: each part-request gets the bio's queue time."""
    events = [blk(100, "queue", 0, 2048)]
    for i in range(8):
        events += [blk(200 + i, "issue", i * 256, 256), blk(1000 + i, "complete", i * 256, 256)]
    res = build_requests(events)
    assert len(res.requests) == 8 and all(r.queue == 100 for r in res.requests)
    assert res.unmatched_bios == 0


def test_partial_completion_completes_once():
    events = [blk(100, "queue", 0, 16), blk(200, "issue", 0, 16), blk(300, "complete", 0, 8),
              blk(400, "complete", 8, 8)]
    (rq,) = build_requests(events).requests
    assert rq.complete == 400 and rq.nr_sector == 16


def test_incomplete_and_unmatched_are_counted():
    events = [blk(100, "queue", 0, 8), blk(200, "issue", 0, 8),  # never completes
              blk(300, "queue", 500, 8),  # a bio no request took (dm, lost events)
              blk(400, "complete", 900, 8)]  # completion of something issued before the recording
    res = build_requests(events)
    assert res.requests == [] and res.incomplete == 1 and res.unmatched_bios == 1


def test_out_of_order_events_are_sorted():
    events = lifecycle(1000, 64, 8)
    (rq,) = build_requests(list(reversed(events))).requests
    assert (rq.queue, rq.issue, rq.complete) == (1000, 1020, 1100)


def test_sector_ranges_through_extents_and_partition():
    m = _mapped(FileMap(DISK, 1, None, [Extent(0, 1 << 20, 8192, 0), Extent(8192, 4 << 20, 8192, 1),
                                        Extent(16384, 0, 4096, 0x4)]))  # the last: delalloc
    assert sector_ranges(0, 4096, m, 0) == [(2048, 2056)]
    # spans both extents; the partition starts at sector 2048
    assert sector_ranges(4096, 8192, m, 2048) == [(2048 + 2056, 2048 + 2064), (2048 + 8192, 2048 + 8200)]
    assert sector_ranges(16384, 4096, m, 0) == []  # not allocated yet: no sectors
    assert sector_ranges(0, 0, m, 0) == [] and sector_ranges(-1, 10, m, 0) == []
    assert sector_ranges(1000, 100, None, 10) == [(11, 13)]  # a block device file: 1:1 (bytes 1000-1099)


def recording(syscalls, block, extents=((0, 1 << 20, 1 << 20),), start_sector=0):
    rec = Recording("x", {"version": 1})
    rec.syscalls, rec.block = list(syscalls), list(block)
    rec.devices[DISK] = Device(DISK, "loop0", DISK, start_sector)
    rec.files[(DISK, 12)] = FileMap(DISK, 12, "/f", [Extent(*e) for e in extents])
    return rec


def test_join_by_extent_and_time():
    # file offset 4096 -> byte 1 MiB + 4096 -> sector 2056
    rec = recording([sys_(900, 2000, 4096, 4096)], lifecycle(1000, 2056, 8))
    res = join(rec)
    (lc,) = res.joined
    assert lc.syscall.offset == 4096 and [r.sector for r in lc.requests] == [2056]
    assert len(res.lifecycles) == 1  # the request is not also a lifecycle of its own


def test_no_join_outside_the_window_or_sectors_or_direction():
    block = (lifecycle(3000, 2056, 8)  # after the syscall returned
             + lifecycle(1000, 4000, 8)  # other sectors
             + lifecycle(1100, 2056, 8, rwbs="R"))  # a read of the same sectors
    res = join(recording([sys_(900, 2000, 4096, 4096)], block))
    assert res.joined == []
    assert len(res.lifecycles) == 4  # the syscall alone and three block-only lifecycles


def test_a_request_joins_one_syscall_only():
    rec = recording([sys_(900, 2000, 4096, 4096, pid=1), sys_(950, 2100, 4096, 4096, pid=2)],
                    lifecycle(1000, 2056, 8))
    joined = join(rec).joined
    assert [lc.syscall.pid for lc in joined] == [1]


def test_partition_offset_and_partition_device():
    rec = recording([sys_(900, 2000, 0, 4096, dev="7:1")], lifecycle(1000, 2048 + 2048, 8))
    rec.devices["7:1"] = Device("7:1", "loop0p1", DISK, 2048)
    rec.files = {("7:1", 12): FileMap("7:1", 12, "/f", [Extent(0, 1 << 20, 1 << 20)])}
    assert len(join(rec).joined) == 1


def test_unmapped_reasons():
    rec = recording([sys_(900, 2000, 0, 4096, ino=99), sys_(900, 2000, 0, 4096, dev="0:50")], [])
    res = join(rec)
    assert res.unmapped == {"no extent map recorded": 1, "not on a block device": 1}


def test_block_device_file_joins_one_to_one():
    rec = recording([sys_(900, 2000, 512 * 100, 4096, call="write", file_type="blk")], lifecycle(1000, 100, 8))
    assert len(join(rec).joined) == 1


def test_join_scales_linearly():
    """20k syscalls each with its request, sequential on one file: well under a second or two
    (an all-pairs join would take minutes)."""
    n, size = 20000, 4096
    syscalls, block = [], []
    for i in range(n):
        t = i * 1000
        syscalls.append(sys_(t, t + 900, i * size, size))
        block += lifecycle(t + 50, i * 8, 8, insert=False)[:1] + [
            blk(t + 70, "issue", i * 8, 8), blk(t + 800, "complete", i * 8, 8)]
    rec = recording(syscalls, block, extents=((0, 0, n * size),))
    started = time.perf_counter()
    res = join(rec)
    elapsed = time.perf_counter() - started
    assert len(res.joined) == n
    assert elapsed < 5, elapsed

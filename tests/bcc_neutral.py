"""A BCC-dialect program read through the engine-neutral protocols (ebpfkit.bcc.neutral), the
same check for either engine: the host runs it on ebpfkit's, the 6.1 VM on both (BCC there has
its headers). The ground truth: openat calls this process makes with a flag nobody else
passes (O_NOCTTY), of files with names the test chose; each is counted in a hash keyed by a
struct and in a per-CPU array, and sent with its path through a perf and a ring buffer."""

from __future__ import annotations

import os
import select

PROGRAM = r"""
struct open_key {
	u32 pid;
	u32 flags;
};

struct open_event {
	u32 pid;
	u32 flags;
	char path[64];
};

BPF_HASH(opens, struct open_key, u64);
BPF_PERCPU_ARRAY(per_cpu_opens, u64, 1);
BPF_PERF_OUTPUT(perf_events);
BPF_RINGBUF_OUTPUT(ring_events, 8);

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
	struct open_key key = {.pid = bpf_get_current_pid_tgid() >> 32, .flags = args->flags};
	struct open_event event = {.pid = key.pid, .flags = key.flags};
	int zero = 0;
	u64 *n;

	if (key.pid != TARGET_PID || !(key.flags & MARK_FLAG))
		return 0;
	opens.increment(key);
	n = per_cpu_opens.lookup(&zero);
	if (n)
		*n += 1;
	bpf_probe_read_user_str(&event.path, sizeof(event.path), args->filename);
	perf_events.perf_submit(args, &event, sizeof(event));
	ring_events.ringbuf_output(&event, sizeof(event), 0);
	return 0;
}
"""
OPENS = 12
FLAGS = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC  # os.open adds O_CLOEXEC


def records(stream, n: int) -> list:
    """``n`` records from ``stream`` (its fileno readable first), or fewer after 10 s."""
    ready, _, _ = select.select([stream.fileno()], [], [], 10)
    assert ready, "the stream's descriptor never became readable"
    got: list = []
    for _ in range(100):
        got.extend(stream.read_batch(100))
        if len(got) >= n:
            break
    return got


def check_either_engine(engine: str, directory) -> None:
    from ebpfkit.bcc.neutral import Program
    from ebpfkit.engine.protocols import EventStream, Table

    names = [f"neutral{i}" for i in range(OPENS)]  # opened relative to the directory: short paths
    for name in names:
        (directory / name).write_text("")
    where = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    cflags = [f"-DTARGET_PID={os.getpid()}", f"-DMARK_FLAG={os.O_NOCTTY}"]
    with Program(text=PROGRAM, cflags=cflags, engine=engine) as program:
        opens, per_cpu = program.table("opens"), program.table("per_cpu_opens")
        perf, ring = program.events("perf_events"), program.events("ring_events")
        assert all(isinstance(t, Table) for t in (opens, per_cpu))
        assert all(isinstance(s, EventStream) for s in (perf, ring))
        for name in names:
            os.close(os.open(name, os.O_RDONLY | os.O_NOCTTY, dir_fd=where))
        os.close(where)
        for stream in (perf, ring):
            got = [(e.pid, e.flags, e.path) for e in records(stream, OPENS)]
            assert got == [(os.getpid(), FLAGS, name) for name in names], (stream.name, got)
        assert perf.lost == 0
        assert opens.to_dicts() == [{"pid": os.getpid(), "flags": FLAGS, "value": OPENS}]
        assert len(opens) == 1 and opens[{"pid": os.getpid(), "flags": FLAGS}] == OPENS
        assert per_cpu[0].sum() == OPENS  # a PerCpu list, one value per possible CPU
        [(key, value)] = opens.pop_all()
        assert (key.pid, key.flags, value) == (os.getpid(), FLAGS, OPENS) and len(opens) == 0
        per_cpu.clear()
        assert per_cpu[0].sum() == 0

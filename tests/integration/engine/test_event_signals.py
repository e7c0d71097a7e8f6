"""Ctrl-C and SIGTERM stop a tool that is busy consuming events, every time.

A signal that lands while libbpf runs a Python callback used to raise inside the ctypes
callback, where Python prints and drops the exception: the tool kept polling forever."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.integration

CHILD = textwrap.dedent(r'''
    import os, sys, threading, ebpfkit
    C = """
    #include "vmlinux.h"
    #include <bpf/bpf_helpers.h>
    #include "ebpfkit.h"
    const volatile u32 targ_tgid = 0;
    struct event { u32 pid; u64 n; };
    EK_EXPORT_TYPE(struct event);
    EK_RINGBUF(events, 1 << 20);
    SEC("tp/syscalls/sys_enter_getppid")
    int on_getppid(void *ctx)
    {
        struct event *e;
        if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
            return 0;
        e = ek_ringbuf_reserve(events, sizeof(*e));
        if (e) { e->pid = targ_tgid; e->n = 1; bpf_ringbuf_submit(e, 0); }
        return 0;
    }
    char LICENSE[] SEC("license") = "GPL";
    """
    spec = ebpfkit.compile(text=C, name="flood.bpf.c")
    spec.rodata["targ_tgid"] = os.getpid()
    def flood():
        while True:
            os.getppid()
    seen = 0
    def slow(ev):
        global seen
        seen += 1
        sum(range(200))  # time spent in Python inside the callback, where signals land
    with spec.load() as obj:
        obj.attach()
        threading.Thread(target=flood, daemon=True).start()
        rb = obj.ring_buffer("events", slow)
        print("POLLING", flush=True)
        try:
            while True:
                rb.poll(100)
        except KeyboardInterrupt:
            print("INTERRUPTED", seen > 0, flush=True)
            sys.exit(130)
''')


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)] * 3)
def test_signal_stops_a_busy_event_loop(sig, code):
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "POLLING"
        time.sleep(0.5)  # well into the flood: the callback runs most of the time
        child.send_signal(sig)
        assert child.wait(timeout=10) == code
        if sig == signal.SIGINT:
            assert child.stdout.read().strip() == "INTERRUPTED True"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

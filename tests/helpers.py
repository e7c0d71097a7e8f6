"""Helpers every test directory shares (tests/conftest.py puts tests/ on sys.path, so
``from helpers import wait_for`` works from tests/unit, tests/integration and tests/vm, in
the VM guest too)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds passed (False): for
    what the kernel does a little after the call that causes it (freeing, socket accounting)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def bpf_objects_held_by(pid: int) -> set[tuple[str, int]]:
    """The BPF programs, links and maps process ``pid`` holds, as ("prog"|"link"|"map", id)
    pairs (empty when it is gone): what it keeps loaded or attached. A link's program counts
    as held with it."""
    from ebpfkit.engine import inventory

    by_kind = inventory.held_by(pid)
    held = {(kind, i) for kind, ids in by_kind.items() for i in ids}
    for link_id in by_kind["link"]:
        info = inventory.link(link_id)
        if info is not None:
            held.add(("prog", info.prog_id))
    return held


def hooks_held_by(pid: int) -> int:
    """How many hooks process ``pid`` keeps its programs on: its bpf_links, where a perf
    event's program (a tracepoint's, kprobe's, uprobe's) is counted by its perf event fd, which
    holds the program with a link (5.15) or without one, by ioctl, before."""
    from ebpfkit.engine import inventory
    from ebpfkit.engine.constants import LinkType

    hooks = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            perf = os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]"
        except FileNotFoundError:  # closed meanwhile
            continue
        hooks += perf and inventory.perf_event_program(pid, int(fd)) is not None
    for link_id in inventory.held_by(pid)["link"]:
        info = inventory.link(link_id)
        hooks += info is not None and info.type != LinkType.PERF_EVENT
    return hooks


def ek(capsys, *args) -> tuple[int, str, str]:
    """Run the ebpfkit CLI in-process, as `ebpfkit ARGS...`: (exit code, stdout, stderr)."""
    from ebpfkit.cli import cli
    from ebpfkit.output import invoke_cli

    capsys.readouterr()
    rc = invoke_cli(cli, [str(a) for a in args], prog_name="ebpfkit")
    out, err = capsys.readouterr()
    return rc, out, err


def ek_json(capsys, *args):
    """`ebpfkit --format json ARGS...`, which must succeed: its last JSON line, parsed."""
    rc, out, err = ek(capsys, "--format", "json", *args)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


def same_config_error(capsys, config_class, settings: dict, cli_args, option: str, message: str):
    """A bad value is one error whichever way the configuration was built: ``config_class(
    **settings)`` (a notebook) and ``config_class.from_mapping(settings)`` (a YAML file) raise
    the same ConfigError naming the setting, and `ebpfkit CLI_ARGS` exits 2 naming ``option``.
    Returns the ConfigError."""
    import pytest

    from ebpfkit.errors import ConfigError

    with pytest.raises(ConfigError) as direct:
        config_class(**settings)
    with pytest.raises(ConfigError) as mapped:
        config_class.from_mapping({k.replace("_", "-"): v for k, v in settings.items()})
    assert str(direct.value) == str(mapped.value)
    assert message in direct.value.reason and direct.value.field in settings
    rc, _, err = ek(capsys, *cli_args)
    assert rc == 2, err
    assert f"Invalid value for {option}: {direct.value.reason}" in err, err
    return direct.value


def signalled_run_leaves_nothing(args, sig, timeout: float = 60.0) -> None:
    """`ebpfkit ARGS` (a running tool, e.g. `hardirqs 1`) killed by ``sig`` once its banner
    is out: it held BPF programs while running, and none of its programs, links or maps is
    left in the kernel after it is gone (SIGKILL too: its bpf_links die with its fds; before
    perf links (5.15) and tcx (6.6) a perf event or a clsact filter holds the program, and
    the event's fd or the tool's reaper goes with it)."""
    import os
    import signal
    import subprocess
    import sys

    from ebpfkit.engine import inventory

    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", *map(str, args)], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        banner = ""
        for line in proc.stderr:
            banner += line
            if "Hit Ctrl-C" in line:
                break
        held = bpf_objects_held_by(proc.pid)
        assert any(kind == "prog" for kind, _ in held), f"nothing loaded: {held} {banner}"
        proc.send_signal(sig)
        rc = proc.wait(timeout=timeout)
        assert rc in (0, -sig, 128 + sig), (rc, proc.stderr.read())
        if sig != signal.SIGKILL:
            assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lookup = {"prog": inventory.program, "link": inventory.link, "map": inventory.map}
    assert wait_for(lambda: not [o for o in held if lookup[o[0]](o[1]) is not None], 5), \
        f"left in the kernel: {[o for o in held if lookup[o[0]](o[1]) is not None]}"


# --- run-queue waits the kernel accounts for (runqlat's ground truth) -------------------------

CPU = max(os.sched_getaffinity(0))
SPIN_SECONDS = 0.3  # of CPU time, each

# Pinned to CPU; on "go", burns SPIN_SECONDS of CPU time and exits.
SPINNER = f"""
import os, sys, time
os.sched_setaffinity(0, {{{CPU}}})
sys.stdin.readline()
end = time.process_time() + {SPIN_SECONDS}
while time.process_time() < end:
    pass
"""


@dataclass
class Truth:
    pid: int
    runs: int         # times it was switched in (schedstat's pcount)
    waited_us: float  # time spent runnable in the run queue (schedstat's run_delay)

    def since(self, before: Truth) -> Truth:
        return Truth(self.pid, self.runs - before.runs, self.waited_us - before.waited_us)


def schedstat(pid: int) -> Truth:
    """What the kernel accounted for ``pid`` so far (a zombie keeps it until reaped)."""
    with open(f"/proc/{pid}/schedstat") as f:
        _, run_delay_ns, pcount = map(int, f.read().split())
    return Truth(pid, pcount, run_delay_ns / 1000)


class Spinners:
    """``count`` SPINNERs on CPU (started with ``launch``, Popen's signature: a cgroup's
    ``popen`` starts them in it), waiting for ``go()``: then they wait for each other (and for
    any other spinners on CPU) in its run queue; ``done()`` is what the kernel accounted for
    each over its whole life (read once it has exited and before it is reaped). ``close()``
    reaps them."""

    def __init__(self, count: int = 2, launch=subprocess.Popen):
        self.procs = []
        try:
            for _ in range(count):
                self.procs.append(launch([sys.executable, "-c", SPINNER], stdin=subprocess.PIPE, text=True))
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def go(self) -> None:
        for proc in self.procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def done(self) -> list[Truth]:
        truths = []
        for proc in self.procs:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            truths.append(schedstat(proc.pid))
        return truths

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
            if proc.poll() is None:
                proc.kill()
            assert proc.wait(timeout=10) in (0, -9)


def spin_two_on_one_cpu(ready=None) -> list[Truth]:
    """Spinners from go to done; ``ready(pids)`` (a context manager) is entered once they exist
    and before they spin, and left after."""
    spinners = Spinners()
    try:
        with ready(spinners.pids) if ready else contextlib.nullcontext():
            spinners.go()
            return spinners.done()
    finally:
        spinners.close()


# --- TCP between two sockets of a process in a cgroup (sockmap's ground truth) -----------------

TO_SERVER, TO_CLIENT = 3 * (1 << 20) + 12345, 777_777

# One TCP loopback connection inside this process's cgroup: both ends are in the map. It says
# "connected", waits for a line on stdin, sends argv[1] bytes to the server and argv[2] back,
# then prints what arrived: {"sent": n, "received": n, "intact": bool}.
EXCHANGE = r"""
import hashlib, json, os, socket, sys

def send(sock, n):
    data = os.urandom(n)
    sock.sendall(data)
    return hashlib.sha256(data).digest()

def receive(sock, n):
    sha, got = hashlib.sha256(), 0
    while got < n:
        chunk = sock.recv(min(1 << 20, n - got))
        if not chunk:
            break
        sha.update(chunk)
        got += len(chunk)
    return got, sha.digest()

to_server, to_client = int(sys.argv[1]), int(sys.argv[2])
with socket.create_server(("127.0.0.1", 0)) as lst:
    client = socket.create_connection(lst.getsockname(), timeout=30)
    server, _ = lst.accept()
server.settimeout(30)
print("connected", flush=True)
sys.stdin.readline()
sent_up = send(client, to_server)
got_up, sha_up = receive(server, to_server)
sent_down = send(server, to_client)
got_down, sha_down = receive(client, to_client)
print(json.dumps({"sent": to_server + to_client, "received": got_up + got_down,
                  "intact": sha_up == sent_up and sha_down == sent_down}), flush=True)
"""


def exchange_in(cgroup, sampler) -> dict:
    """Run EXCHANGE inside ``cgroup``; start sending once ``sampler`` shows both ends."""
    proc = cgroup.popen([sys.executable, "-c", EXCHANGE, str(TO_SERVER), str(TO_CLIENT)],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "connected"
        assert wait_for(lambda: sampler.sample()["sockets"] == 2), sampler.sample()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert result["received"] == result["sent"] and result["intact"], result
    return result


# --- running tools and pinned children (runqlen, runqslower) -------------------------------

def still_in_kernel(held: set[tuple[str, int]], timeout: float = 10.0) -> set[tuple[str, int]]:
    """What of ``held`` (as bpf_objects_held_by gives it) is still in the kernel after up to
    ``timeout`` seconds (the kernel frees programs and maps after an RCU grace period)."""
    from ebpfkit.engine import inventory

    lookup = {"prog": inventory.program, "link": inventory.link, "map": inventory.map}

    def left():
        return {(kind, i) for kind, i in held if lookup[kind](i) is not None}

    wait_for(lambda: not left(), timeout, 0.05)
    return left()


def alerts_within(session, seconds: float = 1.0, *rules: str) -> list:
    """The alerts a detect session raises within ``seconds`` (only those of ``rules``, if any
    are named)."""
    import time

    found, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        found += [a for a in session.poll(50) if not rules or a.rule in rules]
    return found


def _read_until(fd: int, done, timeout: float, text: str = "") -> tuple[bool, str]:
    """Read ``fd`` (raw reads, bounded, so a stuck child fails a test instead of hanging it)
    until ``done(text)``, end-of-file or ``timeout``: (whether done, the text read)."""
    import os
    import select
    import time

    data = text.encode()
    deadline = time.monotonic() + timeout
    while not done(data.decode(errors="replace")):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            return False, data.decode(errors="replace")
        data += chunk
    return True, data.decode(errors="replace")


class RunningTool:
    """`ebpfkit ARGS` in a child process, returned once its banner ("... Hit Ctrl-C to end.")
    is out, so it is tracing. ``stop(sig)`` ends it and returns its stdout; ``kill()`` is the
    cleanup a test's ``finally`` calls."""

    def __init__(self, *args: str, startup_timeout: float = 240.0, stdin: str | None = None):
        """``stdin``: written to the tool's standard input at once (for a command it runs, -c),
        before its banner."""
        import os
        import signal
        import subprocess
        import sys

        env = dict(os.environ, NO_COLOR="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", *args], env=env, text=True,
                                     stdin=subprocess.PIPE if stdin is not None else None,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pid = self.proc.pid
        if stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.flush()
        self.early_stdout = ""  # what wait_for_stdout read
        came, banner = _read_until(self.proc.stderr.fileno(), lambda data: "Hit Ctrl-C" in data, startup_timeout)
        self.banner = banner
        if came:
            return
        self.stop(signal.SIGKILL if self.proc.poll() is None else None)
        raise AssertionError(f"`ebpfkit {' '.join(args)}` did not start within {startup_timeout:g} s "
                             f"(exit {self.proc.returncode}): {self.stderr}")

    def read_stdout_so_far(self) -> str:
        """All that the tool has written to stdout by now (``stop`` and ``finish`` return it
        with the rest)."""
        import os
        import select

        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.early_stdout += chunk.decode(errors="replace")
        return self.early_stdout

    def wait_for_stdout(self, done, timeout: float = 120.0) -> str:
        """Read stdout as it comes until ``done(all of it so far)``: that text (``stop`` and
        ``finish`` return it with the rest). A slow machine takes longer, not a wrong answer;
        the tool ending or ``timeout`` first fails the test."""
        came, self.early_stdout = _read_until(self.proc.stdout.fileno(), done, timeout, self.early_stdout)
        assert came, f"not seen on stdout within {timeout:g} s: {self.early_stdout[-2000:]}"
        return self.early_stdout

    def stop(self, sig=None) -> str:
        """Send ``sig`` (default SIGINT, Ctrl-C) and wait; its stdout. ``returncode`` and
        ``stderr`` tell how it ended."""
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGINT)
        return self.finish(timeout=30)

    def finish(self, timeout: float = 120) -> str:
        """Wait for it to end by itself (after its COUNT intervals), reading what it writes;
        its stdout, and ``returncode`` and ``stderr`` as ``stop`` sets them."""
        stdout, stderr = self.proc.communicate(timeout=timeout)
        self.stdout = self.early_stdout + stdout
        self.stderr = self.banner + stderr
        self.returncode = self.proc.returncode
        return self.stdout

    def kill(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pass  # a child holds its pipes open: the test already failed on what it saw


def traced_while(work, *args: str):
    """`ebpfkit ARGS` tracing while ``work()`` runs, then ended with Ctrl-C (it must exit 0):
    (what ``work()`` returned, the tool's stdout)."""
    tool = RunningTool(*args)
    try:
        result = work()
        stdout = tool.stop()
        assert tool.returncode == 0, tool.stderr
        return result, stdout
    finally:
        tool.kill()


def pinned_python(code: str, cpu: int, **popen):
    """A Python child running ``code`` pinned to ``cpu`` from its exec on, its stdin a pipe
    (for bytes that start or wake it); ``popen``: more Popen arguments (``stdout=PIPE``)."""
    import os
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import os, sys, time\n" + code], stdin=subprocess.PIPE,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), **popen)


def spinner_code(seconds: float) -> str:
    """For pinned_python: wait for a byte on stdin, then burn the CPU for ``seconds`` of wall
    time and exit."""
    return f"""
os.read(0, 1)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    pass
"""


def schedstat_fields(pid: int) -> tuple[int, int, int]:
    """The kernel's account of ``pid``'s main thread: (ns on CPU, ns waiting runnable in a
    run queue, times switched in). A zombie keeps it: read before reaping."""
    with open(f"/proc/{pid}/schedstat") as f:
        on_cpu, run_delay, pcount = map(int, f.read().split())
    return on_cpu, run_delay, pcount


def wait_moved_between_cpus(tracing, held_ms: int = 60) -> tuple[float, float]:
    """A run-queue wait that moves CPU: a sleeper pinned to the highest CPU is woken there
    while a SCHED_FIFO spinner holds it, waits ``held_ms``, and is then moved to the lowest
    CPU (its affinity changed), where it runs at once. Before that it is woken once with the CPU
    free (a wait of µs), so a tool has seen it run. ``tracing(pid)`` is a context manager
    around both wakeups (the tool under test). Returns (the wait schedstat counted in µs, the
    time from the wakeup to the move in µs)."""
    import os
    import subprocess
    import sys
    import time

    cpu, other = max(os.sched_getaffinity(0)), min(os.sched_getaffinity(0))
    assert other != cpu, "needs two CPUs"
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {other})  # the caller must run while the spinner holds cpu
    sleeper = pinned_python("while os.read(0, 1) == b'w':\n    pass\n", cpu)
    spinner = subprocess.Popen(["chrt", "-f", "1", "taskset", "-c", str(cpu), sys.executable, "-c",
                                "import os, time\n" + spinner_code(1.0)], stdin=subprocess.PIPE)
    try:
        time.sleep(0.5)  # both started and blocked in their read()
        with tracing(sleeper.pid):
            sleeper.stdin.write(b"w")  # it runs once where nothing holds the CPU: the tool has seen it
            sleeper.stdin.flush()
            time.sleep(0.05)
            spinner.stdin.write(b"g")
            spinner.stdin.flush()
            time.sleep(0.1)  # the spinner holds cpu
            _, delay0, _ = schedstat_fields(sleeper.pid)
            sleeper.stdin.write(b"w")
            sleeper.stdin.flush()
            woken = time.monotonic()
            time.sleep(held_ms / 1000)
            os.sched_setaffinity(sleeper.pid, {other})
            moved = time.monotonic()
            time.sleep(0.1)
            _, delay1, _ = schedstat_fields(sleeper.pid)
    finally:
        reap(spinner)
        reap(sleeper)
        os.sched_setaffinity(0, mine)
    truth_us = (delay1 - delay0) / 1000
    assert truth_us >= (held_ms - 5) * 1000, truth_us  # it did wait behind the spinner
    return truth_us, (moved - woken) * 1e6


def stop(proc, sig: int = 2, timeout: float = 30.0) -> tuple[str, str]:
    """Stop a running tool with ``sig`` (SIGINT: Ctrl-C) and collect its output. One that has
    not ended within ``timeout`` is killed: a failing test leaves nothing running (what the
    tool printed is returned, and the test fails on that)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return out, (err or "") + f"\n[killed: still running {timeout:g} s after signal {sig}]"


def reap(proc) -> None:
    """End and reap a pinned_python child (for a test's cleanup)."""
    if proc.stdin and not proc.stdin.closed:
        proc.stdin.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


# --- kernel allocations a test makes (memleak kernel mode's ground truth) ---------------------

# the kernel functions memleak's stacks name (each a tuple of the names it had)
PIPE_INFO = ("alloc_pipe_info",)  # kmallocs a pipe's pipe_inode_info and its buffer array
PIPE_PAGE = ("pipe_write", "anon_pipe_write")  # allocates the page an empty pipe's write goes in (renamed in 6.15)


@contextlib.contextmanager
def held_pipes(n: int, written: bool = False):
    """``n`` pipes open for the with block (one byte written in each when ``written``: one
    page allocated for it), all closed at its end."""
    fds: list[int] = []
    try:
        for _ in range(n):
            fds.extend(os.pipe())
            if written:
                os.write(fds[-1], b"x")
        yield
    finally:
        for fd in fds:
            os.close(fd)


def outstanding_naming(stacks, functions: tuple[str, ...]) -> int:
    """How many allocations are outstanding on the memleak stacks (StackAllocs, or their
    JSON dicts) that have a frame in one of the kernel ``functions``."""
    total = 0
    for stack in stacks:
        frames, count = (stack["frames"], stack["count"]) if isinstance(stack, dict) else (stack.frames, stack.count)
        if any(str(frame).split(" ")[0] in functions for frame in frames):
            total += count
    return total


def pipe_allocations(session, n: int, functions: tuple[str, ...], written: bool = False) -> tuple[int, int, int]:
    """A memleak kernel-mode session's outstanding allocations on the stacks naming one of
    ``functions``: before ``n`` pipes are opened, while they are held, and once they are
    closed (waiting up to 30 s for the frees, some of which wait for an RCU grace period)."""
    before = outstanding_naming(session.sample().stacks, functions)
    with held_pipes(n, written):
        held = outstanding_naming(session.sample().stacks, functions)
    seen = [held]

    def fell_back() -> bool:
        seen.append(outstanding_naming(session.sample().stacks, functions))
        return seen[-1] <= n // 4

    wait_for(fell_back, timeout=30, interval=0.5)
    return before, held, seen[-1]


def bcc_dialect_through_ebpfkit(monkeypatch, session_class) -> None:
    """Make ``engine="bcc"`` sessions of ``session_class`` (a HandlerStatsSession) load their
    BCC-dialect program through ebpfkit's own BCC translation: the program checked on a host
    where BCC cannot run (no kernel headers); the VM's tests run it under BCC itself."""
    load = session_class._load_bcc.__func__
    monkeypatch.setattr(session_class, "_load_bcc",
                        classmethod(lambda cls, config, engine="bcc": load(cls, config, engine="ebpfkit")))


def tc_pinnable() -> bool:
    """Whether a tc program can outlive its command here (tcx links, 6.6+), as the probe says."""
    from ebpfkit.engine import features

    return features.probe("tc").value == "tcx"


def refused_for_tcx(done) -> bool:
    """A tc attach on a kernel without tcx: exit 3 naming tcx and the foreground run instead."""
    return done.returncode == 3 and "tcx" in done.stderr and " run` runs it in the foreground" in done.stderr \
        and "Traceback" not in done.stderr


def cgroup_programs(path) -> list[dict]:
    """The programs attached to cgroup ``path`` ({"id", "attach_type", "name"} each, as `bpftool
    -j cgroup show` lists them), asked of the kernel: a VM guest runs the host's bpftool, which
    lists nothing on 5.10 (see inventory.cgroup_programs)."""
    from ebpfkit.engine import inventory

    found = []
    for prog_id, attach_type in inventory.cgroup_programs(str(path)):
        info = inventory.program(prog_id)
        found.append({"id": prog_id, "attach_type": attach_type.name.lower(), "name": info.name if info else None})
    return found


_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}


def blocked_reading_stdin(pid: int) -> bool:
    """Whether process ``pid`` is blocked in read(0, ...): /proc/PID/syscall's number and fd."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] == _READ_SYSCALL.get(os.uname().machine) and fields[1] == "0x0"


SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>: Python's socket module does not name it


def force_receive_buffer(sock, size: int) -> None:
    """A receive buffer of ``size`` past net.core.rmem_max (root), which distributions leave
    at 208 KiB: about 550 small datagrams, fewer than a test's bursts."""
    import socket

    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)

"""BCC's own tools, unmodified as Debian's bpfcc-tools installs them, run by `ebpfkit bcc run`
on this host (no kernel headers, which BCC itself needs): each must show the workload the
test makes (processes that exit with a known code or signal, a known number of syscalls)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import bpf_objects_held_by, reap, still_in_kernel, stop

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs")]

EBPFKIT = [sys.executable, "-m", "ebpfkit"]


def start_tool(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([*EBPFKIT, "bcc", "run", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return proc


def wait_for_header(proc: subprocess.Popen, text: str, timeout: float = 60) -> list[str]:
    """Lines up to and including the first that contains ``text`` (the tool is tracing then)."""
    lines, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the tool ended before '{text}': {proc.wait()} {proc.stderr.read()}")
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"no '{text}' in {timeout} s: {lines}")


# BCC's tools print their header before they open their perf buffers (BCC and ebpfkit alike):
# what happens in between is not seen, so a test lets that moment pass
SETTLE = 1.0


def test_exitsnoop_shows_an_exit_code_and_a_killing_signal():
    proc = start_tool("exitsnoop")
    try:
        wait_for_header(proc, "EXIT_CODE")
        time.sleep(SETTLE)
        coded = subprocess.Popen(["sh", "-c", "exit 3"])
        coded.wait()
        killed = subprocess.Popen(["sleep", "30"])
        killed.send_signal(signal.SIGTERM)
        killed.wait()
        time.sleep(1)
    finally:
        out, err = stop(proc)
    rows = {int(m[1]): m[2].strip() for m in re.finditer(r"^\S+\s+(\d+)\s+\d+\s+\d+\s+[\d.]+\s+(.*)$", out, re.M)}
    assert rows.get(coded.pid) == "code 3", out
    assert rows.get(killed.pid) == "signal 15 (TERM)", out


def test_syscount_counts_a_process_syscalls_by_name():
    workload = subprocess.Popen([sys.executable, "-c", "import os, sys\nsys.stdin.readline()\n"
                                 "for _ in range(4321): os.getppid()\nprint('done', flush=True)\n"
                                 "sys.stdin.readline()\n"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc = start_tool("syscount", "-p", str(workload.pid), "-i", "1")
    try:
        wait_for_header(proc, "Ctrl+C to quit")
        workload.stdin.write("go\n")
        workload.stdin.flush()
        assert workload.stdout.readline() == "done\n"
    finally:
        workload.stdin.close()
        workload.wait(timeout=30)
        time.sleep(0.5)
        out, err = stop(proc)  # its last interval is printed on Ctrl-C
    # the loop may straddle two intervals: their counts add up
    counts = [int(m[1]) for m in re.finditer(r"^getppid\s+(\d+)$", out, re.M)]
    assert sum(counts) == 4321, out + err


def test_an_unknown_tool_is_a_usage_error_naming_where_it_looked():
    proc = subprocess.run([*EBPFKIT, "bcc", "run", "no-such-tool"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "no BCC script 'no-such-tool'" in proc.stderr and "/usr/sbin/no-such-tool-bpfcc" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("what", ["/etc/passwd", "binary"])
def test_a_file_that_is_not_python_is_a_usage_error_naming_it(tmp_path, what):
    path = what if what.startswith("/") else str(tmp_path / "prog")
    if not what.startswith("/"):
        shutil.copy("/bin/true", path)  # NUL bytes: compile() raises ValueError, not SyntaxError
    proc = subprocess.run([*EBPFKIT, "bcc", "run", path], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}" in proc.stderr and "not a Python program" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "unexpected error" not in proc.stderr


def test_tcpstates_shows_a_loopback_connections_state_changes_on_its_port():
    """Two perf buffers (IPv4 and IPv6) read together, socket fields read through the kernel's
    anonymous unions, state names from bcc.tcp."""
    proc = start_tool("tcpstates")
    try:
        wait_for_header(proc, "NEWSTATE")
        time.sleep(SETTLE)
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        client_port = client.getsockname()[1]
        client.close()
        accepted.close()
        server.close()
        time.sleep(1)
    finally:
        out, err = stop(proc)
    # LADDR LPORT RADDR RPORT OLDSTATE -> NEWSTATE, for the client's socket
    moves = re.findall(rf"127\.0\.0\.1\s+{client_port}\s+127\.0\.0\.1\s+{port}\s+(\S+)\s+->\s+(\S+)", out)
    assert moves == [("SYN_SENT", "ESTABLISHED"), ("ESTABLISHED", "FIN_WAIT1"), ("FIN_WAIT1", "FIN_WAIT2"),
                     ("FIN_WAIT2", "CLOSE")], out + err  # (CLOSE -> SYN_SENT comes before its port is bound)
    served = re.findall(rf"127\.0\.0\.1\s+{port}\s+127\.0\.0\.1\s+{client_port}\s+(\S+)\s+->\s+(\S+)", out)
    assert ("SYN_RECV", "ESTABLISHED") in served and ("LAST_ACK", "CLOSE") in served, out


def test_a_tool_killed_with_sigkill_leaves_nothing_loaded():
    proc = start_tool("tcpstates")  # two perf buffers, a hash, a tracepoint link
    try:
        wait_for_header(proc, "NEWSTATE")
        held = bpf_objects_held_by(proc.pid)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert {kind for kind, _ in held} >= {"prog", "link", "map"}, held
    assert still_in_kernel(held) == set()


def test_tplist_reads_tracefs_where_this_system_mounts_it():
    """BCC 0.26's tplist reads /sys/kernel/debug/tracing, absent where debugfs is not mounted
    (this host): `bcc run` points it at tracefs, so it lists a tracepoint and its fields."""
    out = subprocess.run([*EBPFKIT, "bcc", "run", "tplist", "-v", "sched:sched_process_exec"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "sched:sched_process_exec" and "    pid_t pid;" in lines, lines


def trace_on_cue(tool: str, workload_argv: list, header: str) -> tuple[str, str]:
    """Run ``tool`` on a workload that prints "ready", does its work when a line arrives on its
    input, prints "done" and waits: the work happens wholly while the tool traces. The tool
    stops first (an interpreter may do more of the work as it exits)."""
    workload = subprocess.Popen(workload_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert workload.stdout.readline() == "ready\n"
    proc = start_tool(tool, str(workload.pid))
    try:
        wait_for_header(proc, header)
        time.sleep(SETTLE)
        workload.stdin.write("go\n")
        workload.stdin.flush()
        assert workload.stdout.readline() == "done\n"
        time.sleep(1)
    finally:
        out, err = stop(proc)
        workload.stdin.close()
        reap(workload)
    return out, err


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs the system's python3 (its SDT probes)")
def test_pythongc_a_shell_wrapper_of_ugc_shows_each_collection_of_a_python_process():
    """BCC's pythongc is `$lib/ugc -l python "$@"`: run as ugc, on the interpreter's USDT
    probes (gc__start, gc__done); a child collects exactly 4 times, with automatic
    collection off."""
    from ebpfkit.engine import usdt

    python = os.path.realpath("/usr/bin/python3")
    if not usdt.find("gc__start", "python", path=python):
        pytest.skip(f"{python} has no SDT probes")
    out, err = trace_on_cue("pythongc", [python, "-c", "import gc, sys\ngc.disable()\nprint('ready', flush=True)\n"
                                         "sys.stdin.readline()\nfor _ in range(4): gc.collect()\n"
                                         "print('done', flush=True)\nsys.stdin.readline()\n"], "DESCRIPTION")
    collections = re.findall(r"^\d+\.\d+\s+\d+\.\d+\s", out, re.M)  # START (s) and TIME (us) of each
    assert len(collections) == 4, out + err


@pytest.mark.skipif(shutil.which("ruby") is None, reason="needs ruby (scripts/setup.sh --test installs it)")
def test_rubycalls_counts_exactly_the_calls_of_a_ruby_method():
    """rubycalls (`$lib/ucalls -l ruby`) on libruby's USDT probes (method__entry, raised by a
    semaphore): a Ruby child calls a method of its own exactly 37 times while it traces. Ruby
    fires method__entry only while a TracePoint is on (its DTrace docs say to enable one)."""
    out, err = trace_on_cue("rubycalls", ["ruby", "-e", "TracePoint.new(:call, :return) {}.enable\n"
                                          "def ekt_marker; end\n$stdout.sync = true\nputs 'ready'\n$stdin.gets\n"
                                          "37.times { ekt_marker }\nputs 'done'\n$stdin.gets\n"], "Tracing calls")
    # ucalls keys its table by the 80 bytes after each name's address, read whole (as in BCC):
    # a name Ruby builds afresh for each call can leave different bytes after its end, and the
    # method then has several rows; together they count every call
    counts = [int(n) for n in re.findall(r"^Object\.ekt_marker\s+(\d+)$", out, re.M)]
    assert sum(counts) == 37, out + err


@pytest.fixture
def mariadb(tmp_path):
    """MariaDB's server on a socket of its own (no network), started as `mysqld` (the name BCC's
    db tools look for); the path of its socket."""
    if not (os.path.exists("/usr/sbin/mysqld") and shutil.which("mariadb-install-db")):
        pytest.skip("needs MariaDB's server (scripts/setup.sh --test installs it)")
    data, sock = tmp_path / "data", tmp_path / "mysql.sock"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db",
                    "--auth-root-authentication-method=normal"], check=True, capture_output=True, timeout=120)
    server = subprocess.Popen(["/usr/sbin/mysqld", "--no-defaults", f"--datadir={data}", f"--socket={sock}",
                               "--skip-networking", "--user=root", f"--pid-file={data}/pid"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 60
        while not sock.exists() and server.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        assert sock.exists(), "mysqld did not start"
        yield str(sock)
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_dbslower_shows_each_query_mariadb_runs_by_uprobe(mariadb):
    """dbslower's uprobe mode (-x: MariaDB has no USDT probes) finds dispatch_command by a
    regular expression over the server's symbols and reads the query text it is given: three
    queries naming marks of their own appear, each once."""
    proc = start_tool("dbslower", "mysql", "-x", "/usr/sbin/mysqld", "-m", "0")
    marks = [f"ekt{os.getpid()}q{i}" for i in range(3)]
    try:
        wait_for_header(proc, "QUERY")
        time.sleep(SETTLE)
        for mark in marks:
            subprocess.run(["mariadb", "--no-defaults", "-S", mariadb, "-u", "root", "-e", f"SELECT '{mark}'"],
                           check=True, capture_output=True, timeout=30)
        time.sleep(1)
    finally:
        out, err = stop(proc)
    for mark in marks:
        assert len(re.findall(rf"SELECT '{mark}'", out)) == 1, out + err


def test_opensnoop_shows_each_open_of_a_file_with_its_result(tmp_path):
    """BCC's opensnoop attaches kprobes to the open syscalls' functions; where the kernel has no
    kprobes (this host) they run on the syscalls' tracepoints, and each open the test makes
    shows with its pid, its descriptor or its error."""
    present, absent = tmp_path / f"ekt{os.getpid()}.dat", tmp_path / f"ekt{os.getpid()}.missing"
    present.write_text("x")
    proc = start_tool("opensnoop", "-p", str(os.getpid()))
    try:
        wait_for_header(proc, "PATH")
        time.sleep(SETTLE)
        for _ in range(3):
            os.close(os.open(present, os.O_RDONLY))
        with pytest.raises(FileNotFoundError):
            os.open(absent, os.O_RDONLY)
        time.sleep(1)
    finally:
        out, err = stop(proc)
    # PID COMM FD ERR PATH
    opened = re.findall(rf"^{os.getpid()}\s+\S+\s+(\d+)\s+0\s+{re.escape(str(present))}$", out, re.M)
    failed = re.findall(rf"^{os.getpid()}\s+\S+\s+-1\s+2\s+{re.escape(str(absent))}$", out, re.M)
    assert len(opened) == 3 and len(failed) == 1, out + err


@pytest.mark.skipif(os.path.exists(f"/lib/modules/{os.uname().release}/build"), reason="this kernel has its headers")
def test_bccs_own_engine_without_this_kernels_headers_says_what_is_missing():
    """`--engine bcc` runs the tool through BCC itself, which needs this kernel's headers: the
    host has none (the 6.1 VM has, and runs programs through it: tests/vm/test_bcc_vm.py)."""
    env = {k: v for k, v in os.environ.items() if k != "BCC_KERNEL_SOURCE"}
    out = subprocess.run([*EBPFKIT, "bcc", "run", "--engine", "bcc", "exitsnoop"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 3, out.stderr
    assert f"engine='bcc' needs this kernel's headers, which BCC compiles against: none at /lib/modules/" \
           f"{os.uname().release}/build" in out.stderr and "Traceback" not in out.stderr

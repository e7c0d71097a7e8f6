#!/usr/bin/env python3
"""The BCC compatibility matrix (issue #23): every tool Debian's bpfcc-tools installs, run for
a few seconds while a workload does file, process and network work; each row says whether the
tool attached and showed the workload, or why not.

    python scripts/bcc_matrix.py                     # ebpfkit bcc run, on this kernel
    python scripts/bcc_matrix.py --engine bcc        # BCC itself (needs its kernel headers)
    python scripts/bcc_matrix.py --only opensnoop,execsnoop --seconds 6
    ebpfkit vm run --kernel 6.1 -- python scripts/bcc_matrix.py --json /tmp/m.json

A tool passes when it runs until interrupted (or ends by itself with status 0), prints no
traceback and, for the 20 most used, shows the workload's own mark: its unique file name,
process, or port. Others pass on running cleanly with output beyond their banner."""

from __future__ import annotations

import argparse
import fcntl
import glob
import json
import os
import pty
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

TOOLS_DIR = "/usr/sbin"
MARK = f"ekmatrix{os.getpid()}"
CERT = ""  # set in main()
# arguments a tool needs to trace anything (BCC's own examples); {pid} is the workload's,
# {dir} its directory, {dev} the block device under it, {tty} the terminal it writes to
ARGS = {
    "argdist": ["-C", "t:syscalls:sys_enter_openat():int:args->dfd"],
    "funccount": ["t:syscalls:sys_enter_openat"],
    "funcinterval": ["t:syscalls:sys_enter_openat"],
    "funclatency": ["vfs_read"],
    "funcslower": ["-u", "1", "vfs_read"],
    "stackcount": ["t:syscalls:sys_enter_openat"],
    "trace": ["t:syscalls:sys_enter_openat \"%s\", args->filename"],
    "ext4slower": ["0"], "btrfsslower": ["0"], "xfsslower": ["0"], "zfsslower": ["0"], "nfsslower": ["0"],
    "fileslower": ["0"], "biosnoop": [], "profile": ["-F", "99"], "offcputime": ["-p", "{pid}"],
    "memleak": ["-p", "{pid}", "1"], "inject": ["kmalloc", "-P", "0", "__x64_sys_mount()"],
    # MariaDB has no USDT probes: dbslower's uprobe mode (its dispatch_command), as BCC's example
    "dbslower": ["mysql", "-x", "/usr/sbin/mysqld", "-m", "0"], "dbstat": ["mysql"], "mysqld_qslower": ["{mysqld}"], "biolatpcts": ["{dev}", "-i", "1", "-w", "after-rq-alloc"],
    "deadlock": ["{pid}", "--binary", "{libc}"], "dirtop": ["-d", "{dir}"],
    "ttysnoop": ["{tty}"], "netqtop": ["-n", "lo"], "llcstat": ["1"], "cobjnew": ["{pid}"],
}
# BCC's language tools (shell wrappers of ucalls, uflow, ...) watch a process of that language:
# the workload's own for Python (run by the system's python3, which has SDT probes), a JVM
# started with its extended probes for Java, the workload's for the others (a runtime whose
# probes are not there is what the row then says)
for lang in ("java", "node", "perl", "php", "python", "ruby", "tcl"):
    for kind in ("calls", "flow", "gc", "objnew", "stat", "threads"):
        ARGS[f"{lang}{kind}"] = ([] if kind == "stat" else ["{jvm}"] if lang == "java"
                                 else ["{pid}"] if lang == "python" else ["{runtime}"])
# the C library programs here use, where pthread_mutex_lock is (deadlock's --binary)
LIBC = next((line.split(" => ")[1].split()[0]
             for line in subprocess.run(["ldd", "/bin/sh"], capture_output=True, text=True).stdout.splitlines()
             if "libc.so" in line and " => " in line), "/lib/x86_64-linux-gnu/libc.so.6")
WORKLOAD_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# BCC's ustat finds Python processes by the name "python" (what Debian's python-is-python3 and
# most images call it); the workload runs under that name, through a link in its directory
JVM_LOAD = """
public class EkLoad {
    static long sum;
    static void ekMarker(int i) { sum += i; }
    public static void main(String[] args) throws Exception {
        System.out.println("ready");
        long end = System.currentTimeMillis() + Long.parseLong(args[0]) * 1000;
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 1000; i++) { ekMarker(i); sum += new int[16].length; }
            Thread t = new Thread(() -> sum++); t.start(); t.join();
            System.gc();
            Thread.sleep(100);
        }
    }
}
"""
# the 20 most used: what in their output proves they saw the workload
EVIDENCE = {
    "opensnoop": "{mark}", "execsnoop": "{mark}", "statsnoop": "{mark}", "filetop": "{mark}",
    "trace": "{mark}", "tcpconnect": "{port}", "tcplife": "{port}", "killsnoop": r"\b{pid}\b",
    "syscount": "openat", "funccount": "sys_enter_openat", "argdist": "dfd", "stackcount": "openat",
    "biolatency": r"\d+ -> \d+\s+: [1-9]", "runqlat": r"\d+ -> \d+\s+: [1-9]", "biosnoop": "{pid}",
    "tcpretrans": "", "ext4slower": "{mark}", "cachestat": r"\d", "profile": "python", "offcputime": "python",
    # and of others whose workload the matrix makes
    "bashreadline": "{mark}", "deadlock": "Potential Deadlock Detected", "sslsniff": "{mark}", "mountsnoop": "{mark}", "bpflist": r"\b{pid}\b", "ttysnoop": "{mark}",
    # the language tools: the workload's own function and allocations, a collection's line
    "javacalls": "ekMarker", "javaflow": "ekMarker", "javaobjnew": r"\[I",
    "javagc": r"(?m)^\d+\.\d+\s+\d", "pythoncalls": "ekmatrix_call", "pythonflow": "ekmatrix_call",
    "pythongc": r"(?m)^\d+\.\d+\s+\d", "javastat": r"(?m)^\s*{jvm}\s", "pythonstat": r"(?m)^\s*{pid}\s",
    "rubycalls": "ekmatrix_call", "rubyflow": "ekmatrix_call", "rubygc": r"(?m)^\d+\.\d+\s+\d",
    "rubyobjnew": "EkmatrixObject", "rubystat": r"(?m)^\s*{runtime}\s", "phpcalls": "ekmatrix_call",
    "phpflow": "ekmatrix_call", "phpstat": r"(?m)^\s*{runtime}\s", "dbslower": "{mark}",
    "nodestat": r"(?m)^\s*{runtime}\s", "perlstat": r"(?m)^\s*{runtime}\s", "tclstat": r"(?m)^\s*{runtime}\s",
}
WORKLOAD = r"""
import ctypes, json, os, pty, socket, ssl, subprocess, sys, threading, time, signal
mark, port, end, cert = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3]), sys.argv[4]
d = os.path.join(os.environ.get("MATRIX_DIR", "/var/tmp"), mark)
os.makedirs(d, exist_ok=True)
child = subprocess.Popen(["sleep", "3600"])
# a BPF map held open (what bpflist lists): BPF_MAP_CREATE of a one-slot array
attr = (ctypes.c_uint32 * 16)(2, 4, 4, 1)
libc = ctypes.CDLL(None, use_errno=True)
map_fd = libc.syscall(321, 0, ctypes.byref(attr), ctypes.sizeof(attr))
# an interactive bash on a terminal of its own, given a command line to read each loop
term, tty = os.openpty()
bash = subprocess.Popen(["bash", "--norc", "--noprofile", "-i"], stdin=tty, stdout=tty, stderr=tty,
                        start_new_session=True)
print(json.dumps({"child": child.pid, "bash": bash.pid, "tty": os.ttyname(tty)}), flush=True)
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(8)
tls_srv = socket.socket(); tls_srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tls_srv.bind(("127.0.0.1", port + 1)); tls_srv.listen(8)
server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); server_tls.load_cert_chain(cert)
def ekmatrix_call():
    return None
# two mutexes taken in both orders by two threads, one after the other (deadlock: an inversion
# that could deadlock, never one that does); zeroed memory is PTHREAD_MUTEX_INITIALIZER
mutexes = [ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)]
def lock_in_order(first, second):
    libc.pthread_mutex_lock(first); libc.pthread_mutex_lock(second)
    libc.pthread_mutex_unlock(second); libc.pthread_mutex_unlock(first)
def tls_echo():  # an HTTPS server for curl (OpenSSL's SSL_write/SSL_read, which sslsniff probes)
    while True:
        conn, _ = tls_srv.accept()
        with server_tls.wrap_socket(conn, server_side=True) as s:
            s.recv(1000); s.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
threading.Thread(target=tls_echo, daemon=True).start()
while time.time() < end:
    path = os.path.join(d, mark + ".dat")
    with open(path, "wb") as f:
        f.write(os.urandom(65536)); f.flush(); os.fsync(f.fileno())
    with open(path, "rb") as f:
        f.read()
    os.stat(path)
    subprocess.run(["sh", "-c", ": " + mark])
    c = socket.create_connection(("127.0.0.1", port)); a, _ = srv.accept(); c.send(b"x" * 1000); a.recv(1000)
    c.close(); a.close()
    subprocess.run(["curl", "-sk", f"https://127.0.0.1:{port + 1}/{mark}"], stdout=subprocess.DEVNULL)
    socket.getaddrinfo("localhost", port)
    threading.Thread(target=time.sleep, args=(0.01,), name=mark[:15]).start()
    ekmatrix_call()  # a function of its own for the Python language tools
    for pair in (mutexes, mutexes[::-1]):
        locker = threading.Thread(target=lock_in_order, args=pair); locker.start(); locker.join()
    victim = subprocess.Popen(["sleep", "100"]); victim.kill(); victim.wait()  # a kill (killsnoop)
    os.setpriority(os.PRIO_PROCESS, 0, -1); os.setpriority(os.PRIO_PROCESS, 0, 0)  # CAP_SYS_NICE (capable)
    shm = libc.shmget(0, 4096, 0o1600); libc.shmctl(shm, 0, None)  # System V shared memory (shmsnoop)
    listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(1); listener.close()  # solisten
    os.sync()  # syncsnoop
    subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",  # mountsnoop; a namespace of its
                    f"mount -t tmpfs {mark} {d} && umount {d}"])               # own: a kill leaves no mount
    garbage = [[] for _ in range(5000)]  # enough objects for the collector to run (pythongc)
    os.write(term, f": {mark}\n".encode())
    os.unlink(path)
    time.sleep(0.2)
os.kill(child.pid, signal.SIGTERM); child.wait()
bash.kill()
"""



def block_device(path: str) -> str:
    """The name of the disk ``path`` is on (a partition's disk), as /sys/block names it."""
    dev = os.stat(path).st_dev
    real = os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real)


# a process of each other language, where it is installed, calling a function of its own,
# allocating objects of a class of its own and collecting (without one, the tool is given a
# process of no language: what it needs is then plain)
RUNTIMES = {
    "node": ["node", "-e", "function ekmatrix_call() {} setInterval(() => ekmatrix_call(), 10)"],
    "perl": ["perl", "-e", "sub ekmatrix_call {} while (1) { ekmatrix_call(); select(undef, undef, undef, 0.01) }"],
    # Ruby fires method__entry for Ruby methods only while a TracePoint is on (since 2.5; its
    # DTrace docs say to enable one: ruby/ruby#3115, Bug #14582)
    "ruby": ["ruby", "-e", "TracePoint.new(:call, :return) {}.enable; "
             "class EkmatrixObject; end; def ekmatrix_call; EkmatrixObject.new; end; "
             "loop { 100.times { ekmatrix_call }; GC.start; sleep 0.05 }"],
    "php": ["php", "-r", "function ekmatrix_call() { return new stdClass(); } "
            "while (true) { for ($i = 0; $i < 100; $i++) ekmatrix_call(); usleep(50000); }"],
    "tcl": ["tclsh"],
}
# PHP fires its function probes only when told to at start (BCC's ucalls says so too)
RUNTIME_ENV = {"php": {"USE_ZEND_DTRACE": "1"}}


def start_runtime(tool: str):
    lang = next((lang for lang in RUNTIMES if tool.startswith(lang)), None)
    if lang is None or shutil.which(RUNTIMES[lang][0]) is None:
        return None
    started = subprocess.Popen(RUNTIMES[lang], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               env=dict(os.environ, **RUNTIME_ENV.get(lang, {})))
    time.sleep(0.5)  # its libraries mapped
    return started


def start_mysqld(directory: str, mark: str):
    """MariaDB's server on a socket in ``directory`` (no network), started as ``mysqld`` (what
    the db tools look for), and a client sending it a query naming ``mark`` 5 times a second.
    (server, client loop), or None where it is not installed."""
    if not (os.path.exists("/usr/sbin/mysqld") and shutil.which("mariadb-install-db") and shutil.which("mariadb")):
        return None
    data, sock = os.path.join(directory, "mysql"), os.path.join(directory, "mysql.sock")
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db",
                    "--auth-root-authentication-method=normal"], check=True, capture_output=True)
    server = subprocess.Popen(["/usr/sbin/mysqld", "--no-defaults", f"--datadir={data}", f"--socket={sock}",
                               "--skip-networking", "--user=root", f"--pid-file={data}/pid"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # a first start under emulation is slow
    while not os.path.exists(sock) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    query = f"SELECT '{mark}', SLEEP(0.002)"
    client = subprocess.Popen(["sh", "-c", f"while :; do mariadb --no-defaults -S {sock} -u root -e \"{query}\"; "
                               "sleep 0.2; done"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    return server, client


def start_jvm(directory: str, seconds: float):
    """A JVM calling a method, allocating, starting threads and collecting, with HotSpot's
    extended DTrace probes on (method and allocation probes are off without); once it runs."""
    source = os.path.join(directory, "EkLoad.java")
    with open(source, "w") as f:
        f.write(JVM_LOAD)
    jvm = subprocess.Popen(["java", "-XX:+ExtendedDTraceProbes", source, str(int(seconds) + 1)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    jvm.stdout.readline()  # "ready": libjvm is mapped, its probes can be found
    return jvm


WORK_ROOT = "/var/tmp"  # where each run's directory is made (main() may choose an ext4 of its own)


def ext4_of_our_own() -> str | None:
    """Where /var/tmp is on no block device (a VM's 9p root), a 512 MiB ext4 in a file, mounted
    by loop device for the matrix's runs: the block and ext4 tools (biolatpcts, bitesize,
    ext4slower, ...) then see the workload's I/O. Its mount point, or None."""
    if os.major(os.stat("/var/tmp").st_dev) != 0 or not shutil.which("mkfs.ext4"):
        return None
    image, mount_point = "/var/tmp/ekmatrix-ext4.img", "/var/tmp/ekmatrix-ext4"
    subprocess.run(["modprobe", "-q", "ext4"], check=False)
    subprocess.run(["modprobe", "-q", "loop"], check=False)
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    os.makedirs(mount_point, exist_ok=True)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", image], capture_output=True, text=True)
    mounted = made.returncode == 0 and subprocess.run(["mount", "-o", "loop", image, mount_point],
                                                      capture_output=True).returncode == 0
    if not mounted:
        os.unlink(image)
        print(f"(no ext4 of our own: {made.stderr.strip() or 'mount -o loop failed'})", file=sys.stderr)
        return None
    return mount_point


def drop_ext4(mount_point: str) -> None:
    subprocess.run(["umount", mount_point], check=False)
    subprocess.run(["rm", "-rf", mount_point, "/var/tmp/ekmatrix-ext4.img"], check=False)


def make_certificate(directory: str) -> str:
    """A self-signed certificate and key in one PEM file, for the workload's TLS (sslsniff)."""
    pem = os.path.join(directory, "matrix.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=bcc-matrix", "-keyout", pem, "-out", pem + ".crt"], check=True, capture_output=True)
    with open(pem, "a") as key, open(pem + ".crt") as crt:
        key.write(crt.read())
    return pem


def holds_attachment(pid: int) -> bool:
    """Whether process ``pid`` holds a BPF link or a perf event (a kprobe, uprobe, tracepoint
    or sampling event a program is attached to)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "bpf_link" in target or "perf_event" in target:
            return True
    return False


# tools that end with this status once they found what they look for (deadlock: a cycle)
FOUND_EXIT = {"deadlock": 1}
# tools that draw on a terminal (curses): run on a pseudo-terminal of their own
TERMINAL_TOOLS = {"cachetop"}


def run_interrupted(argv: list, seconds: float, startup: float,
                    terminal: bool = False) -> tuple[str, str, int | None]:
    """Run a tool until ``seconds`` after its first line of output (its header: it is tracing
    then, or about to; a compile under emulation can take long) or until it ends; then SIGINT,
    as a user's Ctrl-C. (stdout, stderr, its exit status if it ended by itself, else None.)
    ``terminal``: its input and output a pseudo-terminal, its screen's text returned as lines."""
    if terminal:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        tool = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=dict(os.environ, TERM="xterm"))
        os.close(slave)
        out_file = os.fdopen(master, "r", errors="replace")
    else:
        tool = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        out_file = tool.stdout
    streams: dict = {"out": [], "err": []}

    def read(f, key):
        try:
            streams[key].extend(f)
        except OSError:  # a pseudo-terminal whose other end closed
            pass

    readers = [threading.Thread(target=read, args=(f, k), daemon=True)
               for f, k in ((out_file, "out"), (tool.stderr, "err"))]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + startup
    while not streams["out"] and tool.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # some tools print their header before they compile (profile): until a second line, also
    # wait for it to hold a BPF link or perf event, i.e. to be attached
    while (len(streams["out"]) < 2 and not holds_attachment(tool.pid) and tool.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.2)
    try:
        status = tool.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(tool.pid, signal.SIGINT)
        try:
            tool.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(tool.pid, signal.SIGKILL)
            tool.wait()
        status = None
    for reader in readers:
        reader.join(timeout=5)
    out = "".join(streams["out"])
    if terminal:  # cursor movements become line breaks
        out_file.close()
        out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]", "\n", out)
    return out, "".join(streams["err"]), status


def run_tool(name: str, engine: str, seconds: float, startup: float) -> dict:
    port = 20000 + os.getpid() % 20000
    work_dir = tempfile.mkdtemp(prefix="bcc-matrix-", dir=WORK_ROOT)
    python = os.path.join(work_dir, "python")
    os.symlink(os.path.realpath(WORKLOAD_PYTHON), python)
    load = subprocess.Popen([python, "-c", WORKLOAD, MARK, str(port), str(seconds + startup + 30), CERT],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, MATRIX_DIR=work_dir),
                            start_new_session=True)
    workload = json.loads(load.stdout.readline())
    child = workload["child"]
    jvm = start_jvm(work_dir, seconds + startup + 30) if name.startswith("java") else None
    runtime = start_runtime(name)
    mysqld = start_mysqld(work_dir, MARK) if name in ("dbslower", "dbstat", "mysqld_qslower") else None
    args = [a.format(pid=load.pid, dir=work_dir, dev=block_device(work_dir), tty=workload["tty"],
                     jvm=jvm.pid if jvm else 0, runtime=runtime.pid if runtime else child, libc=LIBC,
                     mysqld=mysqld[0].pid if mysqld else child)
            for a in ARGS.get(name, [])]
    if engine == "ebpfkit":
        argv = [sys.executable, "-m", "ebpfkit", "bcc", "run", name, *args]
    else:  # BCC's Python tools under the system's Python, its language tools' shell wrappers as they are
        tool = os.path.join(TOOLS_DIR, f"{name}-bpfcc")
        with open(tool, "rb") as f:
            python_tool = b"python" in f.readline()
        argv = ["/usr/bin/python3", tool, *args] if python_tool else [tool, *args]
    started = time.monotonic()
    out, err, returncode = run_interrupted(argv, seconds, startup, terminal=name in TERMINAL_TOOLS)
    ended_itself = returncode is not None
    os.killpg(load.pid, signal.SIGKILL)  # the workload and its child
    load.wait()
    if mysqld:
        os.killpg(mysqld[1].pid, signal.SIGKILL)
        mysqld[1].wait()
    for helper in (jvm, runtime, mysqld and mysqld[0]):
        if helper:
            helper.kill()
            helper.wait()
    try:
        os.kill(workload["bash"], signal.SIGKILL)  # in a session of its own
    except ProcessLookupError:
        pass
    subprocess.run(["rm", "-rf", work_dir])
    row = {"tool": name, "engine": engine, "seconds": round(time.monotonic() - started, 1), "status": "pass",
           "reason": ""}
    if "Traceback" in err:
        row.update(status="traceback", reason=_last_line(err))
    elif ended_itself and returncode != 0 and returncode != FOUND_EXIT.get(name):
        row.update(status="fail", reason=_last_line(err) or _last_line(out) or f"exit {returncode}")
    else:
        wanted = EVIDENCE.get(name)
        if wanted is not None and wanted:
            pattern = wanted.format(mark=MARK, port=port, child=child, pid=load.pid, jvm=jvm.pid if jvm else 0,
                                    runtime=runtime.pid if runtime else 0)
            if not re.search(pattern, out):
                row.update(status="no-evidence", reason=f"'{pattern}' not in its output")
        elif len(out.strip().splitlines()) < 2:
            row.update(status="no-output", reason=_last_line(err) or "nothing beyond its banner")
    row["said"] = _last_line(err) or _last_line(out)  # its last words, when it stopped by itself
    row["needs"] = needs(row)
    return row


# why a tool that did not pass could not have: what it needs that the run did not have
NEEDS = (
    ("kprobes", r"has no kprobes"),
    ("a program not installed", r"pidof', 'mysqld|USAGE: mysqld"),
    ("hardware this machine lacks", r"only support Intel|hcall_|powerpc|attach to a hardware event"),
    ("a terminal", r"nocbreak\(\) returned ERR|setupterm"),
    ("a runtime or server built with its USDT probes", r"USDT probe '[^']*' is not in process"),
    ("a module not loaded here (xfs, zfs, nfs, md)", r"\b(xfs|zpl|zfs|nfs|md)_\w+ does not exist"),
    ("an OOM kill, which the matrix does not provoke", r"^oomkill$"),
    ("direct reclaim (memory pressure), which the matrix does not provoke", r"^drsnoop$"),
    ("kernel symbols of data (CONFIG_KALLSYMS_ALL)", r"CONFIG_KALLSYMS_ALL"),
    # BCC 0.26's statsnoop reads its kprobe's registers as the syscall's arguments: on kernels
    # whose syscalls go through wrappers (x86-64 since 4.17) those are the wrapper's, so no path
    # shows (BCC itself likewise, in the 6.1 VM; fixed after 0.26: iovisor/bcc#4668); without
    # kprobes the kernel refuses the reads
    ("a newer BCC (0.26's statsnoop reads a syscall wrapper's registers as the syscall's arguments)",
     r"^statsnoop$"),
    ("a Python whose function__entry probe fires (CPython 3.11 to 3.14 do not: python/cpython#98894)",
     r"^pythoncalls$"),
    ("a Python tool (it is a shell script)", r"nor a wrapper of one"),
)


# tools that attach kprobes whatever their options, after something else that can stop them
# first (cachetop a terminal, ext4slower its own check of /proc/kallsyms, nfsslower the nfs
# module's types): on a kernel without kprobes, they could not have passed
KPROBES_AFTER = {"cachetop", "ext4slower", "nfsslower"}
HAS_KPROBES = os.path.exists("/sys/bus/event_source/devices/kprobe")


def needs(row: dict) -> str:
    """What a row that did not pass needed ("" when nothing outside ebpfkit explains it)."""
    if row["status"] == "pass":
        return ""
    if row["tool"] in KPROBES_AFTER and not HAS_KPROBES:
        return "kprobes"
    words = f"{row['tool']}\n{row['reason']}\n{row.get('said', '')}"
    return next((what for what, pattern in NEEDS if re.search(pattern, words, re.M)), "")


def summary(rows: list) -> str:
    """How many passed, of all and of those that needed nothing the kernel or machine lacks."""
    passed = sum(r["status"] == "pass" for r in rows)
    unmet = {}
    for r in rows:
        if r.get("needs"):
            unmet[r["needs"]] = unmet.get(r["needs"], 0) + 1
    runnable = len(rows) - sum(unmet.values())
    parts = ", ".join(f"{n} need {what}" for what, n in sorted(unmet.items(), key=lambda kv: -kv[1]))
    return (f"{passed} of {len(rows)} pass ({100 * passed / max(1, len(rows)):.0f}%); {parts or 'none need more'}; "
            f"of the {runnable} that need none of these, {passed} pass ({100 * passed / max(1, runnable):.0f}%)")


def _last_line(text: str) -> str:
    """The error line ebpfkit prints (before its hint), else the last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors or lines or [""])[-1][:160]


def render(paths: list[str]) -> str:
    """One table from several runs' printed tables (a column each: "ebpfkit on 6.1...", ...;
    runs of one column in order, a later row replacing an earlier), with the most telling
    reason of each row that did not pass."""
    columns, results = [], {}
    for path in paths:
        with open(path) as f:
            lines = [line.rstrip("\n") for line in f if line.startswith("| ")]
        column = lines[0].split("|")[2].strip()  # a later run of the same column overrides its rows
        if column not in columns:
            columns.append(column)
        for line in lines[2:]:
            tool, status, reason = [cell.strip() for cell in line.strip().strip("|").split("|", 2)]
            results.setdefault(tool, {})[column] = (status, reason)
    out = ["| tool | " + " | ".join(columns) + " | why not |", "| --- |" + " --- |" * (len(columns) + 1)]
    for tool in sorted(results):
        cells = [results[tool].get(c, ("-", "")) for c in columns]
        # a failure says more than a "needs ..." where the kernel lacks what the tool needs
        failed = [r for st, r in cells if st not in ("pass", "-") and r]
        why = next((r for st, r in cells if st not in ("pass", "-") and not st.startswith("needs") and r),
                   failed[0] if failed else "")
        out.append(f"| {tool} | " + " | ".join(st for st, _ in cells) + f" | {why} |")
    return "\n".join(out)


def main() -> int:
    if sys.argv[1:2] == ["--render"]:  # scripts/bcc_matrix.py --render host.txt vm.txt ...
        print(render(sys.argv[2:]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("ebpfkit", "bcc"), default="ebpfkit")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each tool traces")
    parser.add_argument("--startup", type=float, default=60.0,
                        help="how long a tool may take to print its first line (to compile, under emulation)")
    parser.add_argument("--only", help="comma-separated tool names")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    global CERT, WORK_ROOT
    CERT = make_certificate(tempfile.mkdtemp(prefix="bcc-matrix-cert-"))
    ext4 = ext4_of_our_own()
    WORK_ROOT = ext4 or WORK_ROOT
    names = sorted(os.path.basename(p)[:-len("-bpfcc")] for p in glob.glob(os.path.join(TOOLS_DIR, "*-bpfcc")))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    rows = []
    print(f"| tool | {args.engine} on {os.uname().release} | reason |\n| --- | --- | --- |", flush=True)
    for name in names:
        row = run_tool(name, args.engine, args.seconds, args.startup)
        rows.append(row)
        status = f"needs {row['needs']}" if row["needs"] else row["status"]
        print(f"| {name} | {status} | {row['reason'].replace('|', '/')} |", flush=True)
    if ext4:
        drop_ext4(ext4)
    print("\n" + summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernel": os.uname().release, "engine": args.engine, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOOLS_DIR = "/usr/sbin"
MARK = f"ekmatrix{os.getpid()}"
# arguments a tool needs to trace anything (BCC's own examples); {pid} is the workload's
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
    "memleak": ["-p", "{pid}"], "inject": ["kmalloc", "-P", "0"], "dbslower": ["mysql"], "dbstat": ["mysql"],
}
for lang in ("java", "node", "perl", "php", "python", "ruby", "tcl"):
    for kind in ("calls", "flow", "gc", "objnew", "stat", "threads"):
        ARGS[f"{lang}{kind}"] = ["{pid}"] if kind != "stat" else []
# the 20 most used: what in their output proves they saw the workload
EVIDENCE = {
    "opensnoop": "{mark}", "execsnoop": "{mark}", "statsnoop": "{mark}", "filetop": "{mark}",
    "trace": "{mark}", "tcpconnect": "{port}", "tcplife": "{port}", "killsnoop": "{child}",
    "syscount": "openat", "funccount": "sys_enter_openat", "argdist": "dfd", "stackcount": "openat",
    "biolatency": r"\d+ -> \d+\s+: [1-9]", "runqlat": r"\d+ -> \d+\s+: [1-9]", "biosnoop": "{pid}",
    "tcpretrans": "", "ext4slower": "{mark}", "cachestat": r"\d", "profile": "python", "offcputime": "python",
}
WORKLOAD = r"""
import os, socket, subprocess, sys, time, signal
mark, port, end = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3])
d = os.path.join(os.environ.get("MATRIX_DIR", "/var/tmp"), mark)
os.makedirs(d, exist_ok=True)
child = subprocess.Popen(["sleep", "3600"])
print(child.pid, flush=True)
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(8)
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
    socket.getaddrinfo("localhost", port)
    os.unlink(path)
    time.sleep(0.2)
os.kill(child.pid, signal.SIGTERM); child.wait()
"""


def run_tool(name: str, engine: str, seconds: float) -> dict:
    port = 20000 + os.getpid() % 20000
    work_dir = tempfile.mkdtemp(prefix="bcc-matrix-", dir="/var/tmp")
    load = subprocess.Popen([sys.executable, "-c", WORKLOAD, MARK, str(port), str(seconds + 2)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, MATRIX_DIR=work_dir),
                            start_new_session=True)
    child = load.stdout.readline().strip()
    args = [a.format(pid=load.pid) for a in ARGS.get(name, [])]
    if engine == "ebpfkit":
        argv = [sys.executable, "-m", "ebpfkit", "bcc", "run", name, *args]
    else:
        argv = ["/usr/bin/python3", os.path.join(TOOLS_DIR, f"{name}-bpfcc"), *args]
    started = time.monotonic()
    tool = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = tool.communicate(timeout=seconds)
        ended_itself = True
    except subprocess.TimeoutExpired:
        os.killpg(tool.pid, signal.SIGINT)
        try:
            out, err = tool.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(tool.pid, signal.SIGKILL)
            out, err = tool.communicate()
        ended_itself = False
    os.killpg(load.pid, signal.SIGKILL)  # the workload and its child
    load.wait()
    subprocess.run(["rm", "-rf", work_dir])
    row = {"tool": name, "engine": engine, "seconds": round(time.monotonic() - started, 1), "status": "pass",
           "reason": ""}
    if "Traceback" in err:
        row.update(status="traceback", reason=_last_line(err))
    elif ended_itself and tool.returncode != 0:
        row.update(status="fail", reason=_last_line(err) or _last_line(out) or f"exit {tool.returncode}")
    else:
        wanted = EVIDENCE.get(name)
        if wanted is not None and wanted:
            pattern = wanted.format(mark=MARK, port=port, child=child, pid=load.pid)
            if not re.search(pattern, out):
                row.update(status="no-evidence", reason=f"'{pattern}' not in its output")
        elif len(out.strip().splitlines()) < 2:
            row.update(status="no-output", reason=_last_line(err) or "nothing beyond its banner")
    return row


def _last_line(text: str) -> str:
    """The error line ebpfkit prints (before its hint), else the last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors or lines or [""])[-1][:160]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("ebpfkit", "bcc"), default="ebpfkit")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--only", help="comma-separated tool names")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    names = sorted(os.path.basename(p)[:-len("-bpfcc")] for p in glob.glob(os.path.join(TOOLS_DIR, "*-bpfcc")))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    rows = []
    print(f"| tool | {args.engine} on {os.uname().release} | reason |\n| --- | --- | --- |", flush=True)
    for name in names:
        row = run_tool(name, args.engine, args.seconds)
        rows.append(row)
        print(f"| {name} | {row['status']} | {row['reason'].replace('|', '/')} |", flush=True)
    passed = sum(r["status"] == "pass" for r in rows)
    print(f"\n{passed} of {len(rows)} passed ({100 * passed / max(1, len(rows)):.0f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernel": os.uname().release, "engine": args.engine, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

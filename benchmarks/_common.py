"""What startup.py and overhead.py share: which tools exist, how each program is started,
and a Launched process that reports the moment it is attached and can be stopped cleanly."""

from __future__ import annotations

import json
import math
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROGRAMS = HERE / "programs"
BCC_PYTHON = "/usr/bin/python3"  # Debian's python3-bpfcc installs BCC for the system Python only (as ebpfkit.bcc.probe.SYSTEM_PYTHON)
START_TIMEOUT = 120.0


# --- the programs, in each tool's own form ------------------------------------------------------

EBPFKIT_SOURCES = {
    "opencount": str(PROGRAMS / "opencount.bpf.c"),
    "opencount-rawtp": str(PROGRAMS / "opencount_rawtp.bpf.c"),
    "opencount-fentry": str(PROGRAMS / "opencount_fentry.bpf.c"),
    "runqlat": str(REPO / "ebpfkit" / "tools" / "runqlat" / "runqlat.bpf.c"),  # the tool's own program
}
# programs with each hook twice (tp_btf/X, raw_tp/X): the launcher loads the set the tool would
# on this kernel (--typed-or-raw TYPED_ONLY_MAPS:RAW_ONLY_MAPS, as runqlat's session chooses)
EBPFKIT_TYPED_OR_RAW = {"runqlat": "last_runs:last_runs_by_tid"}
BCC_SOURCES = {"opencount": PROGRAMS / "opencount_bcc.c", "runqlat": PROGRAMS / "runqlat_bcc.c"}
BPFTRACE_SOURCES = {"opencount": PROGRAMS / "opencount.bt", "runqlat": PROGRAMS / "runqlat.bt"}


# --- the tools --------------------------------------------------------------------------------

@dataclass
class Tool:
    name: str
    available: bool
    note: str  # what is used, or why it is missing and how to install it
    argv: list = field(default_factory=list)
    env: dict = field(default_factory=dict)


def ebpfkit_tool(workdir: Path) -> Tool:
    venv = REPO / ".venv" / "bin" / "python"
    if venv.exists():
        python, which = str(venv), "the project's .venv"
    else:
        python, which = sys.executable, "sys.executable; no .venv in the repo"
    if "/shims/" in python:
        which += "; WARNING: a pyenv shim adds its own start-up time"
    # Bytecode is cached as in a pip-installed package; a private prefix keeps .pyc files
    # out of the source tree (and works even where PYTHONDONTWRITEBYTECODE is set).
    env = {"PYTHONPYCACHEPREFIX": str(workdir / "pycache"), "PYTHONDONTWRITEBYTECODE": None}
    probe = subprocess.run([python, "-c", "import ebpfkit"], capture_output=True, text=True,
                           env=merged_env(env))
    if probe.returncode != 0:
        return Tool("ebpfkit", False, f"ebpfkit not importable by {python}: scripts/setup.sh "
                    f"({probe.stderr.strip().splitlines()[-1:]})")
    return Tool("ebpfkit", True, f"{python} ({which})", [python, str(PROGRAMS / "launch_ebpfkit.py")], env)


def bcc_tool() -> Tool:
    sys.path[:0] = [str(HERE), str(REPO)]
    from bcc_headers import bcc_kernel_env

    from ebpfkit.bcc.probe import bcc_version

    version = bcc_version(BCC_PYTHON) if os.path.exists(BCC_PYTHON) else None
    if version is None and os.path.exists(BCC_PYTHON) and in_vm():
        # an emulated guest can take longer than bcc_version's 20 s to load libbcc and LLVM over 9p
        probe = subprocess.run([BCC_PYTHON, "-c", "import bcc; print(getattr(bcc, '__version__', '?'))"],
                               capture_output=True, text=True, timeout=START_TIMEOUT)
        version = (probe.stdout.strip() or "?") if probe.returncode == 0 else None
    if version is None:
        return Tool("BCC", False, "not installed: apt-get install python3-bpfcc")
    env, headers = bcc_kernel_env()
    if env is None:
        return Tool("BCC", False, headers)
    return Tool("BCC", True, f"BCC {version} via {BCC_PYTHON}; headers: {headers}",
                [BCC_PYTHON, str(PROGRAMS / "launch_bcc.py")], env)


def bpftrace_tool() -> Tool:
    path = shutil.which("bpftrace")
    if not path:
        return Tool("bpftrace", False, "not installed: apt-get install bpftrace")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()
    # -B none: ATTACHED (printed by BEGIN, which fires once every probe is attached) is not buffered
    return Tool("bpftrace", True, f"{path} {version}", [path, "-B", "none"])


def ebpfkit_feature(tool: Tool, name: str) -> tuple[bool, str]:
    """(supported, reason) of one of ebpfkit's feature probes, asked by the Python that runs
    ebpfkit's launcher (the benchmark's own interpreter may not have ebpfkit)."""
    if not tool.available:
        return False, tool.note
    code = ("import sys; from ebpfkit.engine import features; p = features.probe(sys.argv[1]); "
            "print(int(p.supported), p.reason)")
    out = subprocess.run([tool.argv[0], "-c", code, name], capture_output=True, text=True,
                         env=merged_env(tool.env))
    if out.returncode != 0:
        return False, f"probe failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    supported, _, reason = out.stdout.strip().partition(" ")
    return supported == "1", reason


# --- the VM (another kernel, where kprobes and fentry work) ----------------------------------

BCC_TOOL_DIRS = ("/usr/sbin/{}-bpfcc", "/usr/share/bcc/tools/{}")  # Debian's bpfcc-tools, upstream's install


def bcc_tool_path(name: str) -> str | None:
    """Where BCC's tool ``name`` (e.g. "runqlat") is installed, or None."""
    return next((p for p in (d.format(name) for d in BCC_TOOL_DIRS) if os.path.exists(p)), None)


def in_vm() -> bool:
    """Inside a VM booted by `ebpfkit vm run` (same test as ebpfkit.vm.in_vm, without importing it)."""
    if os.environ.get("EBPFKIT_IN_VM") == "1":
        return True
    try:
        return "ebpfkit.vm=1" in Path("/proc/cmdline").read_text().split()
    except OSError:
        return False


def add_vm_arguments(parser) -> None:
    """--vm [KERNEL] and --vm-timeout, for a benchmark that can run itself inside run_in_vm()."""
    parser.add_argument("--vm", nargs="?", const="", default=None, metavar="KERNEL",
                        help="run the whole benchmark inside a VM kernel (default: the newest installed)")
    parser.add_argument("--vm-timeout", type=float, default=3600, metavar="S", help="kill the VM after S seconds")


def run_in_vm(script: Path, argv: list, kernel: str | None, timeout: float) -> int:
    """Boot the VM kernel with `ebpfkit vm run` and run ``script argv`` inside, as root, over the
    same paths; its output streams through. Returns its exit status (124: timed out)."""
    venv = REPO / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    cmd = [python, "-m", "ebpfkit", "vm", "run", "--timeout", str(int(timeout))]
    if kernel:
        cmd += ["--kernel", kernel]
    cmd += ["--", python, str(script), *argv]
    print(f"booting a VM: {' '.join(cmd)}", file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL).returncode


def build_c(source: str | Path, exe: Path, required: bool = True, flags: tuple = ()) -> Path | None:
    """Compile a benchmark's C loop (``source``: a path, or the text itself) with gcc -O2 (and ``flags``).
    Without a C compiler: exit saying how to get one, or (not ``required``) None."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        if required:
            raise SystemExit("no C compiler: apt-get install gcc (or scripts/setup.sh --bench)")
        return None
    if not isinstance(source, Path):
        path = exe.with_suffix(".c")
        path.write_text(source)
        source = path
    subprocess.run([cc, "-O2", *flags, "-o", str(exe), str(source)], check=True)
    return exe


def preflight() -> str | None:
    """Why the benchmarks cannot run here at all, or None."""
    if os.geteuid() != 0:
        return "the benchmarks load BPF programs: run them as root"
    if not shutil.which("bpftool"):
        return "bpftool not installed (used to check what is attached): apt-get install bpftool"
    return None


def merged_env(extra: dict) -> dict:
    env = dict(os.environ)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


# --- a started program ------------------------------------------------------------------------

class StartError(RuntimeError):
    pass


def _fd_bpf_ids(pid: int) -> tuple[set, set]:
    """(program ids, link ids) the process holds open, from /proc/PID/fdinfo."""
    progs, links = set(), set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return progs, links
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if not target.startswith("anon_inode:bpf"):
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        m = re.search(r"^prog_id:\s*(\d+)", info, re.M)
        if m:
            progs.add(int(m.group(1)))
        m = re.search(r"^link_id:\s*(\d+)", info, re.M)
        if m:
            links.add(int(m.group(1)))
    return progs, links


def _perf_attached(pid: int) -> set:
    """Program ids the process attached through perf events (classic tracepoints, kprobes)."""
    out = subprocess.run(["bpftool", "-j", "perf", "show"], capture_output=True, text=True)
    try:
        entries = json.loads(out.stdout or "[]")
    except ValueError:
        return set()
    return {e["prog_id"] for e in entries if e.get("pid") == pid}


def _prog_exists(prog_id: int) -> bool:
    return subprocess.run(["bpftool", "prog", "show", "id", str(prog_id)], capture_output=True).returncode == 0


class Launched:
    """A launcher process: started, timed until its ATTACHED line, later stopped and checked."""

    def __init__(self, argv: list, env: dict, cwd: str, check_attached: bool = True):
        self.argv = argv
        self.stderr = tempfile.TemporaryFile()
        self.prog_ids, self.link_ids = set(), set()  # (what stop() checks, should the start fail)
        started = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=merged_env(env), cwd=cwd,
                                     start_new_session=True)
        self.line = self._wait_attached(started)
        self.seconds = time.perf_counter() - started
        self.peak_rss_kib = self._vm_hwm()  # read at once: the peak of the start-up
        self.info = dict(kv.split("=", 1) for kv in self.line.split()[1:] if "=" in kv)
        self.attached = None
        if check_attached:
            progs, links = _fd_bpf_ids(self.proc.pid)
            self.prog_ids, self.link_ids = progs, links
            # attached = programs behind a bpf_link or a perf-event attachment
            self.attached = len(progs & (_link_progs(links) | _perf_attached(self.proc.pid)))

    def _wait_attached(self, started: float) -> str:
        fd = self.proc.stdout.fileno()
        buf = b""
        while True:
            left = START_TIMEOUT - (time.perf_counter() - started)
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                err = self._stderr_tail()  # (stop() closes it)
                self.stop()
                raise StartError(f"no ATTACHED within {START_TIMEOUT:.0f}s: {err}")
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait()
                err = self._stderr_tail()
                self.stop()
                raise StartError(f"exited with {self.proc.returncode} before ATTACHED: {err}")
            buf += chunk
            for line in buf.split(b"\n")[:-1]:
                if line.startswith(b"ATTACHED"):
                    return line.decode()

    def _vm_hwm(self) -> int:
        m = re.search(r"^VmHWM:\s*(\d+) kB", Path(f"/proc/{self.proc.pid}/status").read_text(), re.M)
        return int(m.group(1)) if m else 0

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines()
                 if ln.strip() and "RLIMIT_MEMLOCK" not in ln]
        return " | ".join(lines[-4:]) or "(no output on stderr)"

    def stop(self) -> None:
        """SIGINT, wait; SIGKILL the whole session if it hangs. Then check its programs are gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.communicate(timeout=20)  # drains stdout (bpftrace prints its maps)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.communicate()
        else:
            self.proc.communicate()
        self.stderr.close()
        deadline = time.monotonic() + 5
        left = set(self.prog_ids)
        while left and time.monotonic() < deadline:  # the kernel frees programs after an RCU grace period
            left = {p for p in left if _prog_exists(p)}
            if left:
                time.sleep(0.05)
        if left:
            raise StartError(f"programs {sorted(left)} still loaded after {self.argv[0]} exited")


def _link_progs(link_ids: set) -> set:
    progs = set()
    for link_id in link_ids:
        out = subprocess.run(["bpftool", "-j", "link", "show", "id", str(link_id)], capture_output=True,
                             text=True)
        try:
            progs.add(json.loads(out.stdout)["prog_id"])
        except (ValueError, KeyError):
            pass
    return progs


# --- what else is hooked into syscalls (other people's tools disturb the overhead figures) -------

def foreign_syscall_hooks(ours: "Launched | None" = None) -> list[str]:
    """Syscall tracepoints and raw sys_enter/sys_exit hooks attached right now, except those of
    the launcher ``ours``. Any syscall tracepoint puts every task on the slow syscall path."""
    our_pid = ours.proc.pid if ours else None
    our_links = ours.link_ids if ours else set()
    found = []
    out = subprocess.run(["bpftool", "-j", "perf", "show"], capture_output=True, text=True)
    try:
        for e in json.loads(out.stdout or "[]"):
            tp = e.get("tracepoint", "")
            if tp.startswith(("sys_enter", "sys_exit")) and e.get("pid") != our_pid:
                found.append(f"{tp} (pid {e.get('pid')})")
    except ValueError:
        pass
    out = subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True)
    try:
        for e in json.loads(out.stdout or "[]"):
            if (e.get("type") == "raw_tracepoint" and e.get("tp_name") in ("sys_enter", "sys_exit")
                    and e.get("id") not in our_links):
                found.append(f"raw_tp {e['tp_name']} (link {e['id']})")
    except ValueError:
        pass
    return found


def loaded_prog_ids() -> set:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    try:
        return {p["id"] for p in json.loads(out.stdout or "[]")}
    except ValueError:
        return set()


def in_ns(netns: str, argv: list) -> list:
    """``argv`` run in network namespace ``netns``."""
    return ["ip", "netns", "exec", netns, *argv]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# --- a tool started as a user runs it (sched_overhead.py, memleak_bench.py) ---------------------

def vm_hwm(pid: int) -> int:
    """Peak resident memory of ``pid`` so far, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def stop_tool(proc: subprocess.Popen, programs, name: str, timeout: float) -> None:
    """SIGINT (a tool detaches and exits), SIGKILL to its group if it hangs past ``timeout``;
    then its ``programs`` (ids) must be gone, once an RCU grace period has freed them."""
    from ebpfkit.engine import inventory

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    left = set(programs)
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        left = {p for p in left if inventory.program(p) is not None}
        if left:
            time.sleep(0.05)
    if left:
        raise RuntimeError(f"{name}: programs {sorted(left)} still loaded after it exited")


def consecutive_spread(series) -> float:
    """The bare-to-bare spread: median |difference| of consecutive values within each of
    ``series`` (one a way). Added ns below it are not distinguishable from nothing."""
    diffs = [abs(b - a) for values in series for a, b in zip(values, values[1:])]
    return median(diffs) if diffs else float("nan")


def ratio_note(ours: float, theirs: float, target: float, spread: float | None = None) -> str:
    """ours/theirs against ``target`` (PASS at or below it), unless either is missing or
    theirs is within the noise ``spread``."""
    if math.isnan(ours) or math.isnan(theirs) or not theirs:
        return "no figure here"
    if spread is not None and abs(theirs) < spread:
        return f"BCC's added cost ({theirs:+.0f} ns) is within the noise ({spread:.0f} ns): no ratio"
    ratio = ours / theirs
    return f"{ratio:.2f}x (target <= {target}x: {'PASS' if ratio <= target else 'FAIL'})"

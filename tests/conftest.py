"""Suite-wide rules: integration tests need root, and the suite must leave the machine as it
found it. A session fixture snapshots what the kernel holds before the first test and fails the
run if anything the suite created is still there at the end: BPF programs and links, pins under
/sys/fs/bpf/ebpfkit, network namespaces, veths in the root namespace, ebpfkit-* cgroups, loop
devices and QEMU processes.

Other test runs may share the machine, so what is new is attributed before it is called ours:
BPF objects held only by unrelated processes, and ebpfkit-* names carrying the pid of another
live process, are left out.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ebpfkit.net import ChildCgroup, NetNS, create_veth, delete_veth
from ebpfkit.sysinfo.cgroups import cgroup2_mount

# tests/helpers.py is shared by every test directory: put tests/ on the path whatever the import mode
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

SESSION_MARK = "EBPFKIT_TEST_SESSION"
NEEDS_ROOT = "needs root: loads BPF programs into the kernel"
PIN_ROOT = "/sys/fs/bpf/ebpfkit"
_LEAKS = pytest.StashKey[dict]()
_ALERTS_DIR = pytest.StashKey[str]()


def pytest_configure(config):
    # Started from a script's background job (`bash scripts/run-tests.sh &`, nohup) this process
    # inherits SIGINT ignored, and so would every child it starts: a test stopping a tool with
    # SIGINT (Ctrl-C) would wait for it in vain. A handler here is reset to the default in each
    # exec'd child (tests/integration/tools/test_signals.py checks it).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # `detect run` keeps its alerts in /var/log/ebpfkit by default: not the suite's ones
    if "EBPFKIT_DETECT_LOG" not in os.environ:
        import tempfile

        config.stash[_ALERTS_DIR] = tempfile.mkdtemp(prefix="ebpfkit-test-alerts-")
        os.environ["EBPFKIT_DETECT_LOG"] = os.path.join(config.stash[_ALERTS_DIR], "detect.log")
    config.addinivalue_line("markers", "integration: loads real BPF programs into the host kernel (needs root)")
    config.addinivalue_line("markers", "vm: runs inside a VM kernel booted by ebpfkit's harness")


def pytest_unconfigure(config):
    if _ALERTS_DIR in config.stash:
        import shutil

        shutil.rmtree(config.stash[_ALERTS_DIR], ignore_errors=True)
        os.environ.pop("EBPFKIT_DETECT_LOG", None)


# the tools' tests measure scheduling, latencies and rates: they run before the VM tests start
# booting in the background beside the other host tests (ebpfkit's pytest plugin, vm_quiet)
QUIET = ("tests/integration/tools/", "tests/integration/exporter/")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(QUIET):
            item.add_marker("vm_quiet")
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason=NEEDS_ROOT)
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


# --- what exists now -------------------------------------------------------------------

def _bpf_ids(kind: str) -> set[int]:
    """Ids of every BPF program/link in the kernel."""
    from ebpfkit.engine import inventory

    return set(inventory.ids(kind))


def _bpf_holders() -> dict[tuple[str, int], set[int]]:
    """(kind, id) -> pids holding an fd on it (a link's holder also holds its program)."""
    from helpers import bpf_objects_held_by

    holders: dict[tuple[str, int], set[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for held in bpf_objects_held_by(int(pid)):
            holders.setdefault(held, set()).add(int(pid))
    return holders


def _pins() -> set[str]:
    found = set()
    for root, dirs, files in os.walk(PIN_ROOT):
        found.update(os.path.join(root, n) for n in dirs + files)
    return found


def _netns() -> set[str]:
    from pyroute2 import netns

    names = set(netns.listnetns())
    if os.path.isdir("/run/netns"):
        names.update(os.listdir("/run/netns"))
    return names


def _root_veths() -> set[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        links = ipr.get_links()
    veths = set()
    for link in links:
        info = link.get_attr("IFLA_LINKINFO")
        if info and info.get_attr("IFLA_INFO_KIND") == "veth":
            veths.add(f"{link.get_attr('IFLA_IFNAME')} (ifindex {link['index']})")
    return veths


def _ebpfkit_cgroups() -> set[str]:
    top = cgroup2_mount()
    if top is None:
        return set()
    return {root for root, _, _ in os.walk(top) if os.path.basename(root).startswith("ebpfkit-")}


def _loop_devices() -> set[str]:
    try:
        out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {line.strip() for line in out.splitlines() if line.strip()}


def _qemu_pids() -> set[int]:
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        if os.path.basename(argv0).startswith(b"qemu-system"):
            pids.add(int(pid))
    return pids


def _snapshot() -> dict[str, set]:
    snap = {"pins": _pins(), "netns": _netns(), "root veths": _root_veths(),
            "cgroups": _ebpfkit_cgroups(), "loop devices": _loop_devices(), "qemu": _qemu_pids()}
    try:
        snap["progs"], snap["links"] = _bpf_ids("prog"), _bpf_ids("link")
    except Exception:  # no libbpf or no privileges: nothing of ours can be loaded either
        snap["progs"], snap["links"] = set(), set()
    return snap


# --- deciding what is ours ---------------------------------------------------------------

def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _our_tree() -> set[int]:
    """This process and its descendants."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    ours, grew = {os.getpid()}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in ours} - ours
        ours |= new
        grew = bool(new)
    return ours


def _carries_our_mark(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return False
    return f"{SESSION_MARK}={os.getpid()}".encode() in env


_NAME_PID = {"netns": re.compile(r"^ebpfkit-.+-(\d+)-\d+$"), "cgroups": re.compile(r"^ebpfkit-.+-(\d+)$")}


def _not_anothers(kind: str, name: str) -> bool:
    """False when the name says another live process (another test run) made it."""
    m = _NAME_PID[kind].match(os.path.basename(name))
    if not m:
        return True
    pid = int(m.group(1))
    return pid == os.getpid() or not _alive(pid)


def _leaks(before: dict[str, set]) -> dict[str, list]:
    now = _snapshot()
    new = {kind: now[kind] - before[kind] for kind in now}
    leaks: dict[str, list] = {}
    if new["progs"] or new["links"]:
        holders, ours = _bpf_holders(), _our_tree()
        for kind in ("prog", "link"):
            # held by us, or by nobody (attached without a link, pinned): ours to answer for
            mine = [i for i in new[kind + "s"]
                    if not holders.get((kind, i)) or holders[(kind, i)] & ours]
            if mine:
                leaks[f"BPF {kind}s (ids)"] = sorted(mine)
    for kind in ("netns", "cgroups"):
        mine = [n for n in new[kind] if _not_anothers(kind, n)]
        if mine:
            leaks[kind] = sorted(mine)
    for kind in ("pins", "root veths", "loop devices"):
        if new[kind]:
            leaks[kind] = sorted(new[kind])
    if new["qemu"]:
        ours = _our_tree()
        mine = [p for p in new["qemu"] if p in ours or _carries_our_mark(p)]
        if mine:
            leaks["qemu processes (pids)"] = sorted(mine)
    return leaks


@pytest.fixture(scope="session", autouse=True)
def _no_leftovers(request):
    """Fail the run if the suite leaves anything behind."""
    os.environ[SESSION_MARK] = str(os.getpid())  # inherited by every process the suite starts
    before = _snapshot()
    yield
    # programs are freed after an RCU grace period and netns teardown is asynchronous:
    # give the kernel a moment before calling anything a leak
    deadline = time.monotonic() + 5
    leaks = _leaks(before)
    while leaks and time.monotonic() < deadline:
        time.sleep(0.25)
        leaks = _leaks(before)
    if leaks:
        request.config.stash[_LEAKS] = leaks
        lines = "\n".join(f"  {kind}: {', '.join(map(str, items))}" for kind, items in leaks.items())
        _remove_named_leftovers(leaks)
        pytest.fail(f"the test suite left these behind:\n{lines}", pytrace=False)


def _remove_named_leftovers(leaks: dict) -> None:
    """After reporting, remove the leaked namespaces and cgroups whose name carries our pid
    (surely ours), so one failing run does not litter the machine."""
    from pyroute2 import netns

    from ebpfkit.net import remove_cgroup

    ours = re.compile(rf"^ebpfkit-.+-{os.getpid()}(-\d+)?$")
    for name in leaks.get("netns", []):
        if ours.match(name):
            with contextlib.suppress(OSError):
                netns.remove(name)
    for path in leaks.get("cgroups", []):
        if ours.match(os.path.basename(path)):
            with contextlib.suppress(OSError):
                remove_cgroup(path)


def pytest_sessionfinish(session, exitstatus):
    if session.config.stash.get(_LEAKS, None) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- shared fixtures ---------------------------------------------------------------------

def _purpose(request) -> str:
    return re.sub(r"[^a-z0-9]+", "", request.node.originalname.lower().replace("test_", ""))[:16] or "test"


@pytest.fixture
def netns(request):
    """A fresh network namespace (NetNS), removed after the test."""
    with NetNS(_purpose(request)) as ns:
        yield ns


@pytest.fixture
def peer_netns(request):
    """A second fresh namespace: the far end of ``veth_pair``, where test traffic comes from."""
    with NetNS(_purpose(request) + "-peer") as ns:
        yield ns


@pytest.fixture
def veth_pair(netns, peer_netns):
    """A veth pair: end ``a`` (ek0, 10.199.0.1/24) in ``netns``, where programs attach, and end
    ``b`` (ek1, 10.199.0.2/24) in ``peer_netns``, so traffic between them really crosses it."""
    pair = create_veth(netns, peer_netns)
    try:
        yield pair
    finally:
        try:
            delete_veth(pair)
        except Exception:
            pass  # removing the namespaces removes it anyway


@pytest.fixture
def child_cgroup(request):
    """A child cgroup v2 (ChildCgroup), emptied and removed after the test."""
    with ChildCgroup(_purpose(request)) as cg:
        yield cg


# --- a running `ebpfkit iofsstat`, shared by the host and the VM tests ---------------------

class IofsstatRun:
    """`ebpfkit -v --format FMT [--log LOG] [GLOBAL_ARGS] iofsstat ARGS INTERVAL` in a
    subprocess, ready once its banner is out. Each interval is a JSON line on stdout in json
    format, else a JSON line in LOG (where every format keeps it). ``timeout`` bounds each
    wait (long under emulation)."""

    def __init__(self, *args: str, interval: str = "0.3", timeout: float = 10.0, fmt: str = "json",
                 log=None, global_args=()):
        import queue
        import sys
        import threading

        if fmt != "json" and log is None:
            raise ValueError("intervals printed as tables or CSV are counted in a --log file")
        self.timeout, self.fmt, self.log = timeout, fmt, log
        env = dict(os.environ, NO_COLOR="1")
        logging = ["--log", str(log)] if log else []
        self.proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "-v", "--format", fmt, *logging,
                                      *global_args, "iofsstat", *args, interval],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.intervals: list[dict] = []
        self.reader = threading.Thread(target=self._read_stdout, daemon=True)
        self.reader.start()
        for line in self.proc.stderr:  # started (and attached) once the banner is out
            self.stderr.append(line)
            if "Hit Ctrl-C" in line:
                break
        else:
            self.proc.wait()
            raise AssertionError(f"iofsstat did not start (exit {self.proc.returncode}): "
                                 f"{''.join(self.stderr)}")

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line)

    def logged(self) -> list[dict]:
        """The intervals the --log file holds so far."""
        import json

        records = map(json.loads, self.log.read_text().splitlines()) if self.log.exists() else []
        return [r for r in records if r.get("tool") == "iofsstat"]

    def _wait_for_intervals(self, count: int) -> None:
        import json
        import time

        if self.fmt == "json":
            for _ in range(count):
                self.intervals.append(json.loads(self.lines.get(timeout=self.timeout)))
            return
        want = len(self.logged()) + count
        deadline = time.monotonic() + self.timeout * count
        while len(self.logged()) < want:
            assert time.monotonic() < deadline, f"iofsstat logged no interval in {self.timeout} s"
            time.sleep(0.05)

    def stop(self) -> list[dict]:
        """After the caller's IO: wait for two more intervals (the one in progress holds the
        last IO), then stop it; returns every interval (in json format, as printed; else as
        logged)."""
        import json
        import signal

        self._wait_for_intervals(2)
        self.proc.send_signal(signal.SIGTERM)  # SIGINT is ignored when the run is backgrounded
        self.proc.wait(timeout=max(15.0, self.timeout))
        self.stderr.append(self.proc.stderr.read())
        self.reader.join(timeout=self.timeout)  # everything it printed
        if self.fmt != "json":
            self.intervals = self.logged()
        while not self.lines.empty():
            line = self.lines.get()
            if self.fmt == "json":
                self.intervals.append(json.loads(line))
        return self.intervals

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def iofsstat_run():
    """The IofsstatRun class (a fixture, so module-scoped fixtures can use it too)."""
    return IofsstatRun


# --- every program of an object, attached where this kernel allows ---------------------------

# the feature probe (ebpfkit.features) that says whether this kernel runs a section kind
_SECTION_FEATURE = {"tp": "tracepoint", "tracepoint": "tracepoint", "raw_tp": "raw_tp", "tp_btf": "tp_btf",
                    "fentry": "fentry", "fexit": "fexit", "lsm": "lsm", "kprobe": "kprobe",
                    "kretprobe": "kprobe", "xdp": "xdp_native", "sockops": "sockops", "sk_msg": "sk_msg",
                    "sk_skb": "sk_msg", "perf_event": "perf_event", "uprobe": "uprobe", "uretprobe": "uprobe",
                    "tc": "tc"}


class EveryProgram:
    """Loads an ObjectSpec with every program this kernel runs (as its feature probes say) and
    attaches each on a hook of its kind: tracing and LSM programs where their section names,
    XDP and tc (egress) on a veth in a namespace the test made, sockops on a child cgroup, sk_msg/sk_skb on
    the object's SOCKHASH, perf_event programs on cpu-clock sampling of every CPU, uprobes
    and uretprobes on this process's malloc (in its libc). Everything is closed at the end of the test."""

    def __init__(self, veth_pair, netns, cgroup):
        self.veth, self.netns, self.cgroup = veth_pair, netns, cgroup
        self.objects = []

    @staticmethod
    def feature(section: str) -> str:
        kind = section.split("/")[0].split(".")[0]
        if kind not in _SECTION_FEATURE:
            raise AssertionError(f"no attach rule for SEC(\"{section}\"): add one to tests/conftest.py")
        return _SECTION_FEATURE[kind]

    def __call__(self, spec):
        """(obj, links by program name, the programs left out with the probe's reason)."""
        from ebpfkit.engine import features

        refused = {}
        for name, prog in spec.programs.items():
            if not prog.autoload:  # left out by the caller (e.g. the other kernel's variant)
                continue
            probe = features.probe(self.feature(prog.section))
            prog.autoload = probe.supported
            if not probe.supported:
                refused[name] = f"{probe.name}: {probe.reason}"
        obj = spec.load()
        self.objects.append(obj)
        links = {name: self._attach(obj, prog) for name, prog in obj.programs.items() if prog.autoload}
        return obj, links, refused

    def _attach(self, obj, prog):
        kind = self.feature(prog.section)
        if kind == "xdp_native":
            return self.netns.run(prog.attach_xdp, self.veth.a.ifindex, "native")
        if kind == "tc":
            return self.netns.run(prog.attach_tc, self.veth.a.ifindex, "egress")
        if kind == "sockops":
            return prog.attach_cgroup(self.cgroup.path)
        if kind == "sk_msg":
            from ebpfkit.engine.constants import MapType

            sockhash = next(m for m in obj.maps.values() if m.type in (MapType.SOCKHASH, MapType.SOCKMAP))
            return prog.attach_sockmap(sockhash)
        if kind == "perf_event":
            return prog.attach_perf_event(frequency=99)
        if kind == "uprobe":
            from ebpfkit.engine.symbols import read_maps

            libc = next(m.path for m in read_maps(os.getpid()) if os.path.basename(m.path).startswith("libc.so"))
            return prog.attach_uprobe(libc, "malloc", pid=os.getpid(), retprobe=prog.section.startswith("uretprobe"))
        return prog.attach()

    def close(self):
        for obj in self.objects:
            obj.close()


@pytest.fixture
def every_program(veth_pair, netns, child_cgroup):
    """EveryProgram: ``every_program(spec)`` loads and attaches what this kernel allows."""
    attacher = EveryProgram(veth_pair, netns, child_cgroup)
    try:
        yield attacher
    finally:
        attacher.close()

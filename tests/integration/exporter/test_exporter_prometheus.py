"""`ebpfkit exporter` scraped by Debian's real Prometheus server, against work the test does
itself: run-queue waits of a process the kernel accounts for (/proc/PID/schedstat), file
reads and writes of known sizes in a child cgroup, packets an XDP filter drops on a test
veth. Every figure is read back through Prometheus's HTTP query API (/api/v1/query), so the
exposition (OpenMetrics: Prometheus asks for it) is parsed by the real consumer.

Tolerances: the file IO and packet counters must be exact (the kernel counts each call and
packet in a map; the exporter adds them up); the test waits for the next scrapes (1 s apart)
until they show, up to 20 s. A counter's raw value is compared, not ``increase()``, which
extrapolates over its window. The run-queue wait count may differ from schedstat's by
max(2, 1%) (a task preempted between setting a sleeping state and schedule() still waits
runnable: runqlat, as BCC's, judges by the state) and its _sum, exact in BPF, by 5% + 1 ms.
Killed with SIGKILL, the exporter leaves nothing attached.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from ebpfkit.engine import inventory
from ebpfkit.net import in_netns, xdp_attached
from ebpfkit.sysinfo.cgroups import cgroup2_mount
from helpers import Spinners, ek, schedstat, wait_for

pytestmark = pytest.mark.integration

SCRAPE_WAIT = 20.0  # seconds for a figure to reach Prometheus (scrapes are 1 s apart)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


class Exporter:
    """`python -m ebpfkit [GLOBAL] exporter --config CONFIG --listen 127.0.0.1:PORT`, ready once
    its banner is out (its stderr lines kept in ``lines``)."""

    def __init__(self, config, *global_args: str, port: int | None = None):
        self.port = port or free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", *global_args, "exporter", "--config",
                                      str(config), "--listen", f"127.0.0.1:{self.port}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, NO_COLOR="1"))
        self.lines: list[str] = []
        self._new: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            if "Serving /metrics" in line:
                return
        self.kill()
        raise AssertionError(f"the exporter did not start (exit {self.proc.returncode}):\n" + self.stderr)

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def metrics(self) -> str:
        return http_get(f"http://127.0.0.1:{self.port}/metrics")

    def stop(self, sig=signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


class Prometheus:
    """Debian's prometheus on 127.0.0.1, its TSDB in ``tmp``, scraping ``target`` every second."""

    def __init__(self, tmp, target_port: int):
        self.port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
                          "scrape_configs:\n  - job_name: ebpfkit\n    static_configs:\n"
                          f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        assert wait_for(self._ready, 30, 0.2), "prometheus did not become ready"

    def _ready(self) -> bool:
        assert self.proc.poll() is None, "prometheus exited"
        try:
            return "Ready" in http_get(f"http://127.0.0.1:{self.port}/-/ready", 1)
        except OSError:
            return False

    def query(self, expr: str) -> dict[tuple, float]:
        """{sorted label items (without __name__): value} of an instant query."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(http_get(url))
        assert answer["status"] == "success", answer
        return {tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(r["value"][1])
                for r in answer["data"]["result"]}

    def value(self, expr: str) -> float | None:
        found = self.query(expr)
        assert len(found) <= 1, found
        return next(iter(found.values()), None)

    def shows(self, expr: str, expected) -> bool:
        """Whether ``expr`` has come to ``expected`` (a value, or a predicate of it)."""
        value = self.value(expr)
        return expected(value) if callable(expected) else value == expected

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def eventually(prom: Prometheus, expr: str, expected, what: str) -> float | None:
    """Wait for Prometheus to show ``expected`` for ``expr``; assert with what it showed last."""
    if not wait_for(lambda: prom.shows(expr, expected), SCRAPE_WAIT, 0.5):
        pytest.fail(f"{what}: Prometheus shows {expr} = {prom.value(expr)}, expected {expected}")
    return prom.value(expr)


# --- known work -------------------------------------------------------------------------------

READS, READ_SIZE, WRITES, WRITE_SIZE = 37, 4096, 11, 1000

# Reports "ready" once started (its start-up reads happen outside the cgroup), then, on "go",
# does exactly READS reads of READ_SIZE and WRITES writes of WRITE_SIZE on regular files.
FILE_WORKER = """
import os, sys
src, dst = sys.argv[1:3]
print("ready", flush=True)
sys.stdin.readline()
fd = os.open(src, os.O_RDONLY)
for _ in range({reads}):
    assert len(os.read(fd, {read_size})) == {read_size}
os.close(fd)
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for _ in range({writes}):
    assert os.write(fd, b"w" * {write_size}) == {write_size}
os.close(fd)
""".format(reads=READS, read_size=READ_SIZE, writes=WRITES, write_size=WRITE_SIZE)


def file_io_in(cgroup, tmp_path) -> None:
    """FILE_WORKER's IO, done inside ``cgroup``."""
    src = tmp_path / "input.bin"
    src.write_bytes(os.urandom(READS * READ_SIZE))
    worker = subprocess.Popen([sys.executable, "-c", FILE_WORKER, str(src), str(tmp_path / "output.bin")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "ready\n"
        cgroup.add(worker.pid)
        worker.stdin.write("go\n")
        worker.stdin.close()
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


DROPPED = 23


def dropped_frames(pair) -> list[bytes]:
    """DROPPED frames from 192.0.2.9 (the filter's rule drops them), then 5 from the peer's
    own address (passed), across the veth."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    def frame(src, seq):
        return bytes(Ether(src=pair.b.mac, dst=pair.a.mac) / IP(src=src, dst=pair.a.address)
                     / UDP(sport=1000, dport=4000) / f"ekx {seq}".encode())
    return [frame("192.0.2.9", n) for n in range(DROPPED)] + [frame(pair.b.address, n) for n in range(5)]


def send_frames(pair, frames) -> None:
    tx = in_netns(pair.b.netns, socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        tx.bind((pair.b.ifname, 0))
        for frame in frames:
            tx.send(frame)
    finally:
        tx.close()


def exporter_programs(text: str) -> dict[str, int]:
    """{program name: id} of the runqlat and iofsstat programs an exporter's /metrics reports."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.labels["program"]: int(s.labels["id"])
            for family in text_string_to_metric_families(text) if family.name == "ebpfkit_bpf_program_runs"
            for s in family.samples if s.labels["source"] in ("runqlat", "iofsstat")}


def _holds_bpf_stats(pid: int) -> bool:
    fds = f"/proc/{pid}/fd"
    return any(os.readlink(f"{fds}/{fd}") == "anon_inode:bpf-stats" for fd in os.listdir(fds))


# --- the tests --------------------------------------------------------------------------------

def test_prometheus_sees_the_work_the_test_did(veth_pair, child_cgroup, capsys, tmp_path):
    pair = veth_pair
    xdp_source = f"xdp_filter {pair.a.ifname}@{pair.a.netns}"
    cgroup = "/" + os.path.relpath(child_cgroup.path, cgroup2_mount())
    spinners = Spinners()
    config = tmp_path / "exporter.yaml"
    config.write_text(f"sources:\n  - source: runqlat\n    pid: {spinners.pids[0]}\n  - source: iofsstat\n"
                      f"  - source: xdp_filter\n    iface: {pair.a.ifname}\n    netns: {pair.a.netns}\n")
    exporter = Exporter(config)
    prom = attached = None
    try:
        exporter.wait_ready()
        prom = Prometheus(tmp_path, exporter.port)
        eventually(prom, 'up{job="ebpfkit"}', 1, "the exporter is scraped")
        assert prom.query("ebpfkit_exporter_source_up") == {
            (("instance", f"127.0.0.1:{exporter.port}"), ("job", "ebpfkit"), ("source", s)): v
            for s, v in (("runqlat", 1), ("iofsstat", 1), (xdp_source, 0))}  # no filter attached yet
        assert f"source {xdp_source} is down: no ebpfkit XDP filter is attached" in exporter.stderr

        # K run-queue waits: the spinner the runqlat source traces waits for the other
        before = schedstat(spinners.pids[0])  # it waits on stdin: what it ran so far is before the exporter
        spinners.go()
        whole = spinners.done()[0]
        during = whole.since(before)
        low, high = during.runs - max(2, during.runs // 100), whole.runs + max(2, whole.runs // 100)
        count = eventually(prom, "ebpfkit_runqueue_latency_seconds_count",
                           lambda v: v is not None and low <= v <= high, "run-queue waits counted")
        assert during.waited_us > 0.5 * 0.3e6, during  # they really waited for each other
        assert prom.value('ebpfkit_runqueue_latency_seconds_bucket{le="+Inf"}') == count
        total = prom.value("ebpfkit_runqueue_latency_seconds_sum")
        assert during.waited_us * 0.95 - 1000 <= total * 1e6 <= whole.waited_us * 1.05 + 1000, (total, during)
        # the buckets are cumulative and sane: nothing counted below 2 µs that waited ~ms in total
        buckets = sorted((float(dict(k)["le"]), v) for k, v in
                         prom.query("ebpfkit_runqueue_latency_seconds_bucket").items())
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)

        # file IO of known sizes in a child cgroup, then the cgroup removed: its series go
        file_io_in(child_cgroup, tmp_path)
        where = f'{{cgroup="{cgroup}"}}'
        for metric, expected in (("ebpfkit_file_reads_total", READS),
                                 ("ebpfkit_file_read_bytes_total", READS * READ_SIZE),
                                 ("ebpfkit_file_writes_total", WRITES),
                                 ("ebpfkit_file_written_bytes_total", WRITES * WRITE_SIZE)):
            eventually(prom, f"sum({metric}{where})", expected, f"{metric} of the child cgroup")
        labels = next(iter(prom.query(f"ebpfkit_file_reads_total{where}")))
        assert dict(labels)["comm"].startswith("python") and "pid" not in dict(labels)  # no pid label
        child_cgroup.close()
        assert wait_for(lambda: cgroup not in exporter.metrics(), SCRAPE_WAIT, 0.5), "exited cgroup kept"
        eventually(prom, f"sum(ebpfkit_file_reads_total{where})", None, "the gone cgroup's series went stale")

        # packets an XDP filter, attached by the CLI, drops on the test veth
        where_xdp = ["--iface", pair.a.ifname, "--netns", pair.a.netns]
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *where_xdp, "--src", "192.0.2.0/24")
        assert rc == 0, err
        attached = xdp_attached(pair.a.netns, pair.a.ifname)["prog_id"]
        eventually(prom, f'ebpfkit_exporter_source_up{{source="{xdp_source}"}}', 1, "the filter seen once attached")
        send_frames(pair, dropped_frames(pair))
        xdp_labels = f'iface="{pair.a.ifname}",netns="{pair.a.netns}"'
        eventually(prom, f'ebpfkit_xdp_filter_rule_packets_total{{{xdp_labels},rule="src 192.0.2.0/24"}}',
                   DROPPED, "packets the rule dropped")
        assert prom.value(f'ebpfkit_xdp_filter_packets_total{{{xdp_labels},counter="dropped"}}') == DROPPED
        # each BPF program's runs, as the kernel counts them while the exporter runs
        eventually(prom, f'ebpfkit_bpf_program_runs_total{{source="{xdp_source}",program="xdp_filter"}}',
                   lambda v: v is not None and v >= DROPPED + 5, "the filter's runs")
        assert prom.value('sum(ebpfkit_bpf_program_runs_total{source="runqlat"})') > count
        assert prom.value('sum(ebpfkit_bpf_program_run_seconds_total{source="iofsstat"})') > 0

        # SIGKILL: its own programs go with it (the kernel held them by its fds), run-time
        # statistics too (held on by its BPF_ENABLE_STATS fd); the CLI's pinned filter stays
        programs = exporter_programs(exporter.metrics())
        assert {"runqlat_switch", "iofs_exit_read"} <= set(programs), programs
        assert all(inventory.program(i) is not None for i in programs.values())
        assert _holds_bpf_stats(exporter.proc.pid)
        exporter.kill()
        assert wait_for(lambda: all(inventory.program(i) is None for i in programs.values()), 10), \
            "the killed exporter's programs are still loaded"
        assert xdp_attached(pair.a.netns, pair.a.ifname)["prog_id"] == attached
    finally:
        exporter.kill()
        if prom:
            prom.close()
        spinners.close()
        if attached:
            ek(capsys, "xdp", "filter", "detach", "--iface", pair.a.ifname, "--netns", pair.a.netns)


def test_a_source_the_kernel_cannot_run_is_reported_and_the_rest_serve(tmp_path):
    """iofsstat where this kernel cannot run it (forced onto fexit, which this host's kernel
    locks; or, before 5.17, on any hook: it needs bpf_loop): source_up 0 and a log line (JSON on
    stderr with --format json, and in --log), while runqlat serves; Ctrl-C ends it."""
    from ebpfkit.engine import features

    if not features.probe("bpf_loop").supported:
        missing, hook = "bpf_loop", ""
    elif not features.probe("fexit").supported:
        missing, hook = "fexit", "\n    hook: fexit"
    else:
        pytest.skip("this kernel runs iofsstat on every hook: the test needs one without fexit or bpf_loop")
    config = tmp_path / "exporter.yaml"
    config.write_text(f"sources:\n  - source: runqlat\n  - source: iofsstat{hook}\n")
    log = tmp_path / "exporter.log"
    exporter = Exporter(config, "--format", "json", "--log", str(log))
    try:
        exporter.wait_ready()
        text = exporter.metrics()
        assert 'ebpfkit_exporter_source_up{source="runqlat"} 1.0' in text
        assert 'ebpfkit_exporter_source_up{source="iofsstat"} 0.0' in text
        assert "ebpfkit_runqueue_latency_seconds_count" in text and "ebpfkit_file_reads_total" not in text
        assert exporter.stop() == 0
    finally:
        exporter.kill()
    messages = [json.loads(line) for line in exporter.lines if line.startswith("{")]
    down = [m for m in messages if m["message"].startswith("source iofsstat is down: ")]
    assert down and down[0]["level"] == "WARNING" and missing in down[0]["message"], exporter.stderr
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(m.get("message") == down[0]["message"] for m in logged)
    assert "Traceback" not in exporter.stderr


def test_a_port_in_use_is_a_usage_error(tmp_path):
    config = tmp_path / "exporter.yaml"
    config.write_text("sources:\n  - source: runqlat\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "ebpfkit", "exporter", "--config", str(config), "--listen",
                              f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"Invalid value for '--listen': cannot listen on 127.0.0.1:{port}: the port is in use" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_bad_configuration_exits_before_loading_anything(tmp_path):
    config = tmp_path / "exporter.yaml"
    config.write_text("sources:\n  - source: runqlat\n  - source: cpufreq\n")
    run = subprocess.run([sys.executable, "-m", "ebpfkit", "exporter", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and f"{config}:3: unknown source 'cpufreq'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def _scraped(exporter: Exporter) -> dict[tuple, float]:
    """The exporter's /metrics as {(sample name, sorted labels): value}, by prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(exporter.metrics()) for s in family.samples}


def _sum_of(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def test_a_load_balancer_attached_by_another_process_is_read_while_it_runs(veth_pair, tmp_path):
    """The xdp_lb source finds a load balancer opened (pinning nothing) by another process
    through the interface's program: exactly the frames sent to the VIP, per backend and in
    total; once it is gone the source is down and its series are dropped."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from ebpfkit.tools import xdp

    pair, vip, port, n = veth_pair, "10.210.0.100", 8080, 40
    source = f"xdp_lb {pair.a.ifname}@{pair.a.netns}"
    config = tmp_path / "exporter.yaml"
    config.write_text(f"sources:\n  - source: xdp_lb\n    iface: {pair.a.ifname}\n    netns: {pair.a.netns}\n")
    exporter = Exporter(config)
    try:
        exporter.wait_ready()
        assert _scraped(exporter)[("ebpfkit_exporter_source_up", (("source", source),))] == 0
        frames = [bytes(Ether(src=pair.b.mac, dst=pair.a.mac) / IP(src=pair.b.address, dst=vip)
                        / TCP(sport=30000 + i, dport=port, flags="S")) for i in range(n)]
        with xdp.open_lb(iface=pair.a.ifname, netns=pair.a.netns, vip=f"{vip}:{port}/tcp",
                         backends=[pair.b.address, "10.199.0.3,mac=02:00:00:00:00:33"], mode="generic"):
            send_frames(pair, frames)
            assert wait_for(lambda: _sum_of(_scraped(exporter), "ebpfkit_xdp_lb_backend_packets_total") == n, 10), \
                _scraped(exporter)
            samples = _scraped(exporter)
            assert samples[("ebpfkit_exporter_source_up", (("source", source),))] == 1
            backends = {dict(labels)["backend"] for (name, labels) in samples
                        if name == "ebpfkit_xdp_lb_backend_packets_total"}
            assert backends == {pair.b.address, "10.199.0.3"}
            assert _sum_of(samples, "ebpfkit_xdp_lb_backend_bytes_total") == sum(map(len, frames))
            where = (("counter", "forwarded"), ("iface", pair.a.ifname), ("netns", pair.a.netns))
            assert samples[("ebpfkit_xdp_lb_packets_total", where)] == n
        samples = _scraped(exporter)
        assert samples[("ebpfkit_exporter_source_up", (("source", source),))] == 0
        assert _sum_of(samples, "ebpfkit_xdp_lb_backend_packets_total") == 0  # its series dropped
        assert exporter.stop() == 0
    finally:
        exporter.kill()


def test_sockmap_counters_of_an_enabled_cgroup_and_the_guard_not_running(child_cgroup, tmp_path):
    """The sockmap source reads what `sockmap enable` pinned on a child cgroup: exactly the
    bytes a process in it sent over TCP loopback; disabled, it is down and its series go.
    No guard runs on this host (no BPF-LSM): the guard source says so and stays down."""
    from ebpfkit.tools import sockmap
    from helpers import exchange_in

    cgroup = "/" + os.path.relpath(child_cgroup.path, cgroup2_mount())
    config = tmp_path / "exporter.yaml"
    config.write_text(f"sources:\n  - source: sockmap\n    cgroup: {child_cgroup.path}\n  - source: guard\n")
    sockmap.enable(child_cgroup.path, sockmap.Options(ports=()))
    exporter = Exporter(config)
    try:
        exporter.wait_ready()
        up = ("ebpfkit_exporter_source_up", (("source", "sockmap"),))
        assert _scraped(exporter)[up] == 1
        assert _scraped(exporter)[("ebpfkit_exporter_source_up", (("source", "guard"),))] == 0
        assert "source guard is down: the guard is not running" in exporter.stderr
        result = exchange_in(child_cgroup, sockmap.attached(child_cgroup.path))
        where = (("cgroup", cgroup), ("container", ""), ("pod_uid", ""))
        samples = _scraped(exporter)
        assert samples[("ebpfkit_sockmap_redirected_bytes_total", where)] == result["sent"]
        assert samples[("ebpfkit_sockmap_sockets_added_total", where)] == 2
        assert samples[("ebpfkit_sockmap_fallback_messages_total", where)] == 0
        sockmap.disable(child_cgroup.path)
        samples = _scraped(exporter)
        assert samples[up] == 0 and _sum_of(samples, "ebpfkit_sockmap_redirected_bytes_total") == 0
        assert exporter.stop() == 0
    finally:
        exporter.kill()
        if sockmap.session.find(child_cgroup.path) is not None:
            sockmap.disable(child_cgroup.path)


def test_a_filter_whose_rules_change_or_that_is_attached_anew_is_followed(veth_pair, capsys, tmp_path):
    """The xdp_filter source keeps its session open between scrapes (a large filter's rules
    are decoded once): a rule added or deleted by another command shows at the next scrape;
    a detach takes the source down with its series; a new attach (a new program) is read."""
    pair = veth_pair
    where = ["--iface", pair.a.ifname, "--netns", pair.a.netns]
    source = ("ebpfkit_exporter_source_up", (("source", f"xdp_filter {pair.a.ifname}@{pair.a.netns}"),))
    config = tmp_path / "exporter.yaml"
    config.write_text(f"sources:\n  - source: xdp_filter\n    iface: {pair.a.ifname}\n    netns: {pair.a.netns}\n")

    def rules() -> set[str]:
        return {dict(labels)["rule"] for name, labels in _scraped(exporter)
                if name == "ebpfkit_xdp_filter_rule_packets_total"}

    exporter = Exporter(config)
    try:
        assert ek(capsys, "xdp", "filter", "attach", *where, "--src", "192.0.2.0/24")[0] == 0
        exporter.wait_ready()
        assert rules() == {"src 192.0.2.0/24"}
        assert ek(capsys, "xdp", "filter", "rules", "add", *where, "--dst", "198.51.100.7")[0] == 0
        assert rules() == {"src 192.0.2.0/24", "dst 198.51.100.7/32"}
        assert ek(capsys, "xdp", "filter", "rules", "del", *where, "1")[0] == 0
        assert rules() == {"dst 198.51.100.7/32"}
        assert ek(capsys, "xdp", "filter", "detach", *where)[0] == 0
        assert _scraped(exporter)[source] == 0 and rules() == set()
        assert ek(capsys, "xdp", "filter", "attach", *where, "--proto", "icmp")[0] == 0
        send_frames(pair, dropped_frames(pair)[:3])  # not ICMP: passed, counted as such
        samples = _scraped(exporter)
        assert samples[source] == 1 and rules() == {"proto icmp"}
        counted = (("counter", "passed"), ("iface", pair.a.ifname), ("netns", pair.a.netns))
        assert samples[("ebpfkit_xdp_filter_packets_total", counted)] >= 3
        assert exporter.stop() == 0
    finally:
        exporter.kill()
        ek(capsys, "xdp", "filter", "detach", *where)


def test_softirq_and_hardirq_sources_count_what_the_kernel_counts(veth_pair, tmp_path):
    """UDP datagrams over the test veth, sent from one CPU (NET_RX there), and O_DIRECT
    writes the disk answers with an IRQ: between two scrapes, the softirqs source's NET_RX
    runs on that CPU and the hardirqs source's runs of the disk's IRQs match /proc/softirqs
    and /proc/interrupts over the same interval (within 10% or 5: they are read a few ms
    apart); the NET_RX histogram's _count and _sum are its runs and seconds."""
    from irqs import CPU, UdpReceiver, direct_writes, disk_irqs, interrupts, proc_softirqs, send_udp

    config = tmp_path / "exporter.yaml"
    config.write_text("sources:\n  - source: softirqs\n    per_cpu: true\n    dist: true\n"
                      "  - source: hardirqs\n")
    irqs = disk_irqs(tmp_path)
    receiver = UdpReceiver(veth_pair)
    exporter = Exporter(config)
    try:
        send_udp(veth_pair, 5)  # neighbour resolution, before anything is measured
        exporter.wait_ready()
        before, soft_before, hard_before = _scraped(exporter), proc_softirqs(), interrupts()
        send_udp(veth_pair, 300)
        direct_writes(tmp_path / "data")
        soft_after, hard_after, after = proc_softirqs(), interrupts(), _scraped(exporter)
        assert receiver.drain() >= 300

        def moved(name: str, **labels) -> float:
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0) - before.get(key, 0)

        def close_to(counted: float, truth: int) -> bool:
            return abs(counted - truth) <= max(5, truth // 10)

        net_rx = {"vector": "NET_RX", "cpu": str(CPU)}
        truth = soft_after[CPU] - soft_before[CPU]
        runs = moved("ebpfkit_softirq_runs_total", **net_rx)
        assert truth >= 150 and close_to(runs, truth), (runs, truth)
        assert moved("ebpfkit_softirq_duration_seconds_count", **net_rx) == runs
        seconds = moved("ebpfkit_softirq_seconds_total", **net_rx)
        assert 0 < seconds and moved("ebpfkit_softirq_duration_seconds_sum", **net_rx) == pytest.approx(seconds)
        for irq, name in irqs.items():
            truth = hard_after[irq][1] - hard_before[irq][1]
            counted = moved("ebpfkit_hardirq_runs_total", irq=str(irq), handler=name)
            assert close_to(counted, truth), (irq, name, counted, truth)
        assert sum(hard_after[i][1] - hard_before[i][1] for i in irqs) >= 50  # the writes raised them
        assert exporter.stop() == 0
    finally:
        exporter.kill()
        receiver.close()


BIG_WRITER = """
import os, sys
print("ready", flush=True)
sys.stdin.readline()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for _ in range(1024):
    assert os.write(fd, b"w" * 65536) == 65536
os.close(fd)
"""


def test_iofsstat_top_shows_only_the_series_that_moved_the_most_bytes(child_cgroup, tmp_path):
    """`top: 2`: a process in the test's child cgroup writes 64 MiB, more than anything else
    on this machine in that time: its series is shown, exactly, and at most one other."""
    cgroup = "/" + os.path.relpath(child_cgroup.path, cgroup2_mount())
    config = tmp_path / "exporter.yaml"
    config.write_text("sources:\n  - source: iofsstat\n    top: 2\n")
    exporter = Exporter(config)
    writer = None
    try:
        exporter.wait_ready()
        writer = subprocess.Popen([sys.executable, "-c", BIG_WRITER, str(tmp_path / "big.bin")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline() == "ready\n"
        child_cgroup.add(writer.pid)
        writer.stdin.write("go\n")
        writer.stdin.close()
        assert writer.wait(timeout=60) == 0
        shown = {dict(labels)["cgroup"]: value for (name, labels), value in _scraped(exporter).items()
                 if name == "ebpfkit_file_written_bytes_total"}
        assert shown.get(cgroup) == 1024 * 65536, shown
        assert len(shown) <= 2, shown
        assert exporter.stop() == 0
    finally:
        exporter.kill()
        if writer is not None and writer.poll() is None:
            writer.kill()
            writer.wait()

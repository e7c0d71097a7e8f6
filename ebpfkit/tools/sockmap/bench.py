"""`ebpfkit sockmap bench` and benchmarks/sockmap_bench.py: the same measurement.

Each mode gets a fresh child cgroup of its own, attached once per workload: plain TCP, the
minimal sockops+sk_msg sample of the source documents (IPv4 only, no sk_skb verdict), and
ebpfkit's sockmap. Servers and clients all run inside the mode's cgroup, over loopback.
Workloads:
- sockperf TCP ping-pong (64 B) p50/p99 latency with server and client pinned to one CPU:
  what the stack costs, which is what sockmap changes. Free on every CPU (for information)
  a round trip also waits for the other CPU to wake up, which in a VM can take most of it.
- iperf3 throughput against its default server (listening on "::", so the server side is
  an IPv4-mapped AF_INET6 socket), plain and with TCP_NODELAY.
- nginx as a load balancer in front of two nginx backends, driven by wrk.
Modes are interleaved over several rounds, in a new random order each round; values are
medians, ratios are medians of the per-round ratios (paired within a round), since a shared
2-CPU machine is noisy. How noisy is measured in the same run: the sample runs twice, in
two cgroups (the A/A control), and latency ratios against the sample are judged against
that spread. The sk_msg programs' own cost per message comes from the kernel's run-time
statistics, in a short pinned ping-pong of its own (the statistics slow every message).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ...net import ChildCgroup

MODES = ("plain", "minimal", "ebpfkit")
# The sample once more, in a cgroup of its own: two identical setups measured in the same
# rounds show how far apart noise alone puts them (the A/A control). Latency only.
AGAIN = "minimal, again"
# ebpfkit without the FIONREAD/epoll workaround (the sk_skb verdict program), where "auto"
# attaches it: the like-for-like match for the minimal sample, which has none. Latency
# only: without the workaround, epoll servers such as nginx stall on such kernels.
NO_VERDICT = "ebpfkit, no sk_skb"

# The source documents' program, rewritten minimally: IPv4 only, both ports in network
# order, no verdict program. The reference ebpfkit's sockmap must never be slower than.
MINIMAL_SAMPLE = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct sock_key { __u32 sip, dip, sport, dport, family; };

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65535);
	__type(key, struct sock_key);
	__type(value, int);
} sock_ops_map SEC(".maps");

SEC("sockops")
int minimal_sockops(struct bpf_sock_ops *skops)
{
	if (skops->family != 2 /* AF_INET */)
		return 1;
	if (skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
		return 1;
	struct sock_key key = {
		.sip = skops->local_ip4, .dip = skops->remote_ip4,
		.sport = bpf_htonl(skops->local_port), .dport = skops->remote_port,
		.family = skops->family,
	};
	bpf_sock_hash_update(skops, &sock_ops_map, &key, BPF_NOEXIST);
	return 1;
}

SEC("sk_msg")
int minimal_redir(struct sk_msg_md *msg)
{
	struct sock_key key = {
		.sip = msg->remote_ip4, .dip = msg->local_ip4,
		.sport = msg->remote_port, .dport = bpf_htonl(msg->local_port),
		.family = msg->family,
	};
	bpf_msg_redirect_hash(msg, &sock_ops_map, &key, BPF_F_INGRESS);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f} s") from None
            time.sleep(0.05)


def stop(proc: subprocess.Popen | None, timeout: float = 5.0) -> None:
    """Stop a process we started and its children (it leads its own process group, so
    nginx workers cannot outlive a killed master), SIGKILL if it lingers."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)


# --- acceleration modes -------------------------------------------------------------------

@contextlib.contextmanager
def accelerated(mode: str, cgroup: str):
    """Nothing, the minimal sample, or ebpfkit's sockmap on ``cgroup`` for the block; yields
    the sk_msg program that runs for each message (None for plain TCP)."""
    if mode == "plain":
        yield None
    elif mode in ("minimal", AGAIN):
        from ...engine import compile as compile_bpf

        with compile_bpf(text=MINIMAL_SAMPLE, name="sockmap_minimal.bpf.c").load() as obj:
            obj.programs["minimal_redir"].attach_sockmap(obj.maps["sock_ops_map"])
            obj.programs["minimal_sockops"].attach_cgroup(cgroup)
            yield obj.programs["minimal_redir"]
    elif mode in ("ebpfkit", NO_VERDICT):
        from .core import Accelerator, Options

        with Accelerator(cgroup, Options(skb_verdict="off" if mode == NO_VERDICT else "auto")) as acc:
            yield acc.obj.programs["sockmap_redirect"]
    else:
        raise ValueError(f"unknown mode {mode!r}")


# --- workloads ----------------------------------------------------------------------------

_PERCENTILE = re.compile(r"percentile (\d+\.\d+) =\s+([\d.]+)")


def sockperf(cg: ChildCgroup, duration: float, size: int = 64, cpu: int | None = None) -> dict:
    """TCP ping-pong: p50/p99 latency in µs (sockperf reports half the round trip). With
    ``cpu``, server and client both run on that CPU."""
    pin = {} if cpu is None else {"preexec_fn": lambda: os.sched_setaffinity(0, {cpu})}
    port = free_port()
    server = cg.popen(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **pin)
    try:
        wait_port(port)
        out = cg.run(["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", str(size),
                      "-t", str(int(duration))], capture_output=True, text=True, timeout=duration + 30,
                     **pin).stdout
    finally:
        stop(server)
    pct = {float(p): float(v) for p, v in _PERCENTILE.findall(out)}
    if 50.0 not in pct:
        raise RuntimeError(f"sockperf printed no percentiles:\n{out[-800:]}")
    return {"p50_us": pct[50.0], "p99_us": pct[99.0]}


def iperf3(cg: ChildCgroup, duration: float, nodelay: bool = False) -> dict:
    """Throughput in Gbit/s of an IPv4 client against iperf3's default server (on "::")."""
    port = free_port()
    server = cg.popen(["iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      start_new_session=True)
    try:
        wait_port(port)
        argv = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(int(duration)), "-J"]
        out = cg.run(argv + (["-N"] if nodelay else []), capture_output=True, text=True,
                     timeout=duration + 30).stdout
    finally:
        stop(server)
    try:
        end = json.loads(out)["end"]
        return {"gbits": end["sum_received"]["bits_per_second"] / 1e9}
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"iperf3 failed: {out[-800:]}") from exc


NGINX_BACKEND = """
worker_processes 1;
daemon off;
user root;
pid {dir}/{name}.pid;
error_log {dir}/{name}-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp-{name};
    proxy_temp_path {dir}/tmp-{name};
    fastcgi_temp_path {dir}/tmp-{name};
    uwsgi_temp_path {dir}/tmp-{name};
    scgi_temp_path {dir}/tmp-{name};
{body}
}}
"""

WEB = """    server {{
        listen 127.0.0.1:{port};
        location / {{ default_type text/plain; return 200 "Hostname: {name}\\n"; }}
        location /big {{ root {dir}; }}
    }}"""

BALANCER = """    upstream webservers {{
        server 127.0.0.1:{b1};
        server 127.0.0.1:{b2};
        keepalive 512;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://webservers;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}"""


@dataclass
class NginxLB:
    """nginx load balancer on ``port`` in front of two nginx web servers, all in ``cg``."""

    cg: ChildCgroup
    directory: str
    backends_inside: bool = True  # False: the web servers run outside the cgroup
    big: int = 1 << 20            # size of /big/file, a static file the backends serve
    port: int = 0
    procs: list = field(default_factory=list)

    def __enter__(self):
        b1, b2, self.port = free_port(), free_port(), free_port()
        os.makedirs(os.path.join(self.directory, "big"), exist_ok=True)
        with open(os.path.join(self.directory, "big", "file"), "wb") as f:
            f.write(os.urandom(self.big))
        try:
            for name, body in (("http1", WEB.format(port=b1, name="http1", dir=self.directory)),
                               ("http2", WEB.format(port=b2, name="http2", dir=self.directory)),
                               ("lb", BALANCER.format(b1=b1, b2=b2, port=self.port))):
                conf = os.path.join(self.directory, f"{name}.conf")
                with open(conf, "w") as f:
                    f.write(NGINX_BACKEND.format(dir=self.directory, name=name, body=body))
                argv = ["nginx", "-c", conf, "-e", os.path.join(self.directory, f"{name}-error.log")]
                start = self.cg.popen if name == "lb" or self.backends_inside else subprocess.Popen
                self.procs.append(start(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True))
            for port in (b1, b2, self.port):
                wait_port(port)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for proc in reversed(self.procs):
            stop(proc)
        self.procs = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def fetch(self, n: int = 8) -> list[str]:
        """n responses fetched by a client inside the cgroup (one connection each)."""
        code = ("import sys, urllib.request\n"
                "for _ in range(int(sys.argv[2])):\n"
                "    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())\n")
        out = self.cg.run([sys.executable, "-c", code, self.url, str(n)], capture_output=True, text=True,
                          timeout=60)
        if out.returncode:
            raise RuntimeError(f"fetching {self.url} failed: {out.stderr[-500:]}")
        return out.stdout.split("\n")[:-1]


_WRK_RATE = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_WRK_NON2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_WRK_TOTAL = re.compile(r"(\d+) requests in")


def wrk(cg: ChildCgroup, url: str, duration: float, connections: int = 100, threads: int = 2) -> dict:
    out = cg.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{int(duration)}s", "--timeout", "2s", url],
                 capture_output=True, text=True, timeout=duration + 30).stdout
    rate = _WRK_RATE.search(out)
    if not rate:
        raise RuntimeError(f"wrk printed no rate:\n{out[-800:]}")
    errors = _WRK_ERRORS.search(out)
    non2xx = _WRK_NON2XX.search(out)
    return {"req_per_s": float(rate.group(1)), "requests": int(_WRK_TOTAL.search(out).group(1)),
            "errors": sum(map(int, errors.groups())) if errors else 0,
            "non_2xx": int(non2xx.group(1)) if non2xx else 0}


def nginx_wrk(cg: ChildCgroup, duration: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ebpfkit-sockmap-nginx-") as tmp, NginxLB(cg, tmp) as lb:
        seen = sorted(set(lb.fetch(8)))
        result = wrk(cg, lb.url, duration)
    return {**result, "backends_seen": seen}


# --- the run ------------------------------------------------------------------------------

@dataclass
class Metric:
    name: str
    unit: str
    lower_is_better: bool
    target: float | None = None  # ratio ebpfkit/plain to reach (<= if lower is better)
    values: dict = field(default_factory=dict)  # mode -> median value
    samples: dict = field(default_factory=dict)  # mode -> value of each round (None: failed)
    notes: dict = field(default_factory=dict)  # mode -> text (errors, failures)

    def ratios(self, mode: str, base: str = "plain") -> list[float]:
        """value(mode) / value(base) of each round both were measured in."""
        runs, bases = self.samples.get(mode, []), self.samples.get(base, [])
        return [v / b for v, b in zip(runs, bases) if v is not None and b]

    def ratio(self, mode: str, base: str = "plain") -> float | None:
        """Median over rounds of the paired ratios: a round where the whole machine was
        slower cancels out."""
        pairs = self.ratios(mode, base)
        return statistics.median(pairs) if pairs else None

    def noise(self) -> float | None:
        """How far above 1.0 the median ratio of two identical setups may land by chance in
        this run: two standard errors of a median, from the spread of the A/A control's
        paired ratios (interquartile range of their logarithms, a robust sigma)."""
        pairs = self.ratios(AGAIN, "minimal")
        if len(pairs) < 3:
            return None
        q1, _, q3 = statistics.quantiles([math.log(r) for r in pairs], n=4)
        sigma = (q3 - q1) / 1.349
        return math.exp(2 * 1.2533 * sigma / math.sqrt(len(pairs))) - 1

    @property
    def alike(self) -> str:
        """The ebpfkit mode to hold against the sample: without the workaround the sample
        lacks, when it was measured (the workaround's cost is shown beside)."""
        return NO_VERDICT if self.samples.get(NO_VERDICT) else "ebpfkit"

    def ok(self) -> bool | None:
        r, m = self.ratio("ebpfkit"), self.ratio("minimal")
        if r is None or self.target is None:
            return None
        good = r <= self.target if self.lower_is_better else r >= self.target
        if m is not None and self.name == "sockperf p50":
            # never worse than the sample: not further above it than noise puts the sample
            # above itself (without an A/A control, not above it at all)
            good = good and self.ratio(self.alike, "minimal") <= 1.0 + (self.noise() or 0.0)
        if self.name.startswith("nginx"):
            good = good and not self.notes.get("ebpfkit")
        return good

    def to_dict(self) -> dict:
        return {"metric": self.name, "unit": self.unit,
                **{m: self.values.get(m) for m in (*MODES, NO_VERDICT, AGAIN)},
                "minimal_ratio": self.ratio("minimal"), "ebpfkit_ratio": self.ratio("ebpfkit"),
                "ebpfkit_vs_minimal": self.ratio("ebpfkit", "minimal"),
                "no_skb_verdict_vs_minimal": self.ratio(NO_VERDICT, "minimal"),
                "a_a": self.ratio(AGAIN, "minimal"), "noise": self.noise(), "samples": self.samples,
                "target": self.target_text, "ok": self.ok(), "notes": self.notes}

    @property
    def target_text(self) -> str:
        if self.target is None:
            return ""
        return f"{'≤' if self.lower_is_better else '≥'} {self.target:.2f}×"


@dataclass
class BenchResult:
    metrics: list[Metric]
    kernel: str
    duration: float
    rounds: int = 1

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "duration": self.duration, "rounds": self.rounds, "metrics": [m.to_dict() for m in self.metrics]}

    def table(self):
        from ...output import Column, ResultTable

        def num(v):
            return "-" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.0f}")

        def ratio(v):
            return "-" if v is None else f"{v:.2f}×"

        def a_a(m):
            r, noise = m.ratio(AGAIN, "minimal"), m.noise()
            return ratio(r) + ("" if noise is None else f" ±{noise * 100:.0f}%")

        rows = []
        for m in self.metrics:
            ok = m.ok()
            notes = "; ".join(f"{k}: {v}" for k, v in m.notes.items())
            rows.append({"metric": f"{m.name} ({m.unit})", "plain": num(m.values.get("plain")),
                         "minimal": num(m.values.get("minimal")), "ebpfkit": num(m.values.get("ebpfkit")),
                         "min_x": ratio(m.ratio("minimal")), "ek_x": ratio(m.ratio("ebpfkit")),
                         "ek_min": ratio(m.ratio("ebpfkit", "minimal")),
                         "nv_min": ratio(m.ratio(NO_VERDICT, "minimal")), "a_a": a_a(m),
                         "target": m.target_text, "ok": {True: "yes", False: "NO", None: ""}[ok],
                         "notes": notes})
        columns = [Column("METRIC", key="metric"), Column("PLAIN", key="plain", align="right"),
                   Column("MINIMAL", key="minimal", align="right"),
                   Column("EBPFKIT", key="ebpfkit", align="right"), Column("MIN×", key="min_x", align="right"),
                   Column("EK×", key="ek_x", align="right"), Column("EK/MIN", key="ek_min", align="right"),
                   Column("NO-SKB/MIN", key="nv_min", align="right"),
                   Column("A/A", key="a_a", align="right"),
                   Column("TARGET", key="target"),
                   Column("OK", key="ok"), Column("NOTES", key="notes", max_width=18)]
        return ResultTable(columns, rows, title=f"sockmap bench, kernel {self.kernel}: median of {self.rounds} "
                                                f"rounds of {self.duration:.0f} s", width=140)


def _missing_tools(only) -> list[str]:
    need = {"sockperf": ["sockperf"], "iperf3": ["iperf3"], "nginx": ["nginx", "wrk"]}
    return [t for w in only for t in need[w] if shutil.which(t) is None]


def _pinned_cpu() -> int:
    return max(os.sched_getaffinity(0))


def _measure(workload: str, setup: tuple, duration: float, rps: Metric, mode: str):
    """(metric name, value) pairs of one run of ``workload`` in ``setup``, (its cgroup,
    its sk_msg program)."""
    cg, program = setup
    if workload == "sockperf":
        pinned = sockperf(cg, duration, cpu=_pinned_cpu())
        spread = sockperf(cg, duration)
        cost = [] if program is None else [("sk_msg program", program_cost(program, cg))]
        return [("sockperf p50", pinned["p50_us"]), ("sockperf p99", pinned["p99_us"]),
                ("sockperf p50, 2 CPUs", spread["p50_us"]), *cost]
    if workload == "iperf3":
        return [("iperf3 [::] server", iperf3(cg, duration)["gbits"]),
                ("iperf3 TCP_NODELAY", iperf3(cg, duration, nodelay=True)["gbits"])]
    r = nginx_wrk(cg, duration)
    bad = r["errors"] + r["non_2xx"]
    if bad or len(r["backends_seen"]) != 2:
        rps.notes[mode] = f"{bad} errors, backends {','.join(r['backends_seen'])}"
    return [("nginx LB + wrk", r["req_per_s"])]


def program_cost(program, cg: ChildCgroup, duration: float = 1.0) -> float:
    """ns per run of the sk_msg ``program`` during a pinned ping-pong of its own, from the
    kernel's run-time statistics. Their own two clock reads per run are included (the same
    for every program); they slow each message down by as much, so the latency runs are
    made without them."""
    from ...engine import run_time

    ns, runs = run_time([program], lambda: sockperf(cg, duration, cpu=_pinned_cpu()))
    if not runs:
        raise RuntimeError(f"{program.name} never ran")
    return ns / runs


_FAILURES = (RuntimeError, subprocess.TimeoutExpired, TimeoutError)


def run_bench(duration: float = 3.0, rounds: int = 3, only=None, progress=lambda *a: None,
              seed: int | None = None) -> BenchResult:
    import platform

    from ...errors import NotSupportedError
    from .regression import detect

    only = list(only or ("sockperf", "iperf3", "nginx"))
    missing = _missing_tools(only)
    if missing:
        raise NotSupportedError("bench", f"the bench needs {', '.join(missing)}",
                                hint="apt-get install sockperf iperf3 nginx-light wrk "
                                     "(or scripts/setup.sh --bench)")
    p50 = Metric("sockperf p50", "µs", True, 0.8)
    p99 = Metric("sockperf p99", "µs", True)
    p50_spread = Metric("sockperf p50, 2 CPUs", "µs", True)
    cost = Metric("sk_msg program", "ns/msg", True)
    ip_default = Metric("iperf3 [::] server", "Gbit/s", False, 1.8)
    ip_nodelay = Metric("iperf3 TCP_NODELAY", "Gbit/s", False, 1.8)
    rps = Metric("nginx LB + wrk", "req/s", False, 1.1)
    metrics = {"sockperf": [p50, p99, p50_spread, cost], "iperf3": [ip_default, ip_nodelay], "nginx": [rps]}
    samples: dict = {}  # (metric name, mode) -> values, one per round (None: that run failed)
    verdict_on = detect().affected  # does "auto" attach the workaround here?
    rng = random.Random(seed)
    for workload in only:
        modes = MODES
        if workload == "sockperf":
            modes += (AGAIN,) + ((NO_VERDICT,) if verdict_on else ())
        with contextlib.ExitStack() as stack:
            setups = {}  # mode -> (its cgroup, its sk_msg program)
            for i, mode in enumerate(modes):
                cg = stack.enter_context(ChildCgroup(f"sockmapbench{i}"))
                setups[mode] = cg, stack.enter_context(accelerated(mode, cg.path))

            def record(name, mode, round_, value):
                samples.setdefault((name, mode), [None] * rounds)[round_] = value

            for round_ in range(rounds):
                for mode in rng.sample(modes, len(modes)):
                    progress("%s round %d: %s", workload, round_ + 1, mode)
                    try:
                        for name, value in _measure(workload, setups[mode], duration, rps, mode):
                            record(name, mode, round_, value)
                    except _FAILURES as exc:
                        for m in metrics[workload]:
                            m.notes[mode] = f"failed: {str(exc).splitlines()[0][:60]}"
    for (name, mode), values in samples.items():
        metric = next(m for ms in metrics.values() for m in ms if m.name == name)
        measured = [v for v in values if v is not None]
        if measured:
            metric.values[mode] = statistics.median(measured)
        metric.samples[mode] = values
    chosen = [m for w in only for m in metrics[w]]
    return BenchResult(chosen, platform.release(), duration, rounds)

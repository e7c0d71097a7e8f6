"""The exporter's lifetime: turn the kernel's BPF run-time statistics on, listen (a port in
use fails before any program is loaded), open the sources, serve /metrics until stopped,
then close everything.

prometheus_client serves the registry (its WSGI server answers the text format, or
OpenMetrics when the scraper's Accept header asks for it). Run-time statistics are held on
by BPF_ENABLE_STATS's fd, which the kernel closes if we die, even by SIGKILL: nothing to
restore by hand.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time

from ..errors import ConfigError, NotSupportedError
from ..output import get_logger
from .collector import ExporterCollector
from .config import DEFAULT_LISTEN, ExporterConfig
from .labels import MetricTable
from .sources import SOURCES

log = get_logger("ebpfkit.exporter")


def parse_listen(text: str) -> tuple[str, int]:
    """"HOST:PORT" ("[::1]:9435" for IPv6) -> (host, port); ConfigError("listen") if it is not."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("listen", f"{text!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN}, [::1]:9435)")
    return host, int(port)


def build_collector(config: ExporterConfig, bpf_stats: bool) -> ExporterCollector:
    table = MetricTable(config.series_limit)
    sources = [SOURCES[s.kind](s.options, table, config.pid_label) for s in config.sources]
    return ExporterCollector(sources, table, bpf_stats)


def listen(host: str, port: int, registry):
    """prometheus_client's HTTP server on (host, port), serving in a thread; ConfigError
    naming --listen when the address cannot be used (in use, not ours)."""
    from prometheus_client import start_http_server

    try:
        return start_http_server(port, host, registry)
    except OSError as exc:
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ConfigError("listen", f"cannot listen on {host}:{port}: {why}") from None


def _bpf_run_time_stats(stack: contextlib.ExitStack) -> bool:
    """Run-time statistics on until ``stack`` closes; False (and a log line) where they cannot be."""
    from ..engine import run_time_stats

    try:
        stack.enter_context(run_time_stats())
        return True
    except NotSupportedError as exc:
        log.warning("BPF programs' run time is not counted: %s", exc)
        return False


def serve(config: ExporterConfig, address: str, ready=None) -> None:
    """Serve until SIGINT/SIGTERM. ``ready(collector)`` is called once the sources are open
    (a scrape before that waits for them)."""
    from prometheus_client import CollectorRegistry, ProcessCollector

    host, port = parse_listen(address)
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # the exporter's own CPU and memory
    with contextlib.ExitStack() as stack:
        collector = build_collector(config, _bpf_run_time_stats(stack))
        stack.callback(collector.close)
        registry.register(collector)
        server, thread = listen(host, port, registry)
        stack.callback(thread.join, 5)
        stack.callback(server.server_close)
        stack.callback(server.shutdown)
        collector.start()
        log.info("serving /metrics on %s:%d (pid %d)", host, port, os.getpid())
        if ready:
            ready(collector)
        while True:
            time.sleep(3600)

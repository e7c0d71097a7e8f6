"""`ebpfkit exporter`: the configuration file -> sources, served as Prometheus metrics."""

from __future__ import annotations

import click

from ..output import Output
from .config import DEFAULT_LISTEN

EXAMPLES = """\b
Examples:
  ebpfkit exporter --config exporter.yaml                 serve on 127.0.0.1:9435/metrics
  ebpfkit exporter --config exporter.yaml --listen 0.0.0.0:9435
  ebpfkit --format json exporter --config exporter.yaml   messages as JSON lines on stderr
  curl -s 127.0.0.1:9435/metrics | grep ^ebpfkit_
The example configuration: ebpfkit/exporter/example.yaml.
"""


@click.command(epilog=EXAMPLES)
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The exporter's YAML configuration: which sources, with which settings.")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where to serve /metrics.")
def exporter(config_path, listen):
    """Serve tool sessions (runqlat, iofsstat; the pinned xdp filter and load balancer,
    sockmap, guard) as Prometheus metrics, read from the kernel at each scrape."""
    from ..tools.common import usage_errors
    from .config import load_config
    from .server import serve

    out = Output.from_context()
    out.service_messages()
    config = load_config(config_path)  # a bad file: exit 2, FILE:LINE and the setting

    def ready(collector):
        for state in collector.states:
            out.info("source %s: %s", state.source.name, "up" if state.up else f"down ({state.problem})")
        up = sum(state.up for state in collector.states)
        out.banner(f"Serving /metrics on {listen}: {up} of {len(collector.states)} sources up. Hit Ctrl-C to end.")

    with usage_errors():
        try:
            serve(config, listen, ready)
        except KeyboardInterrupt:
            pass

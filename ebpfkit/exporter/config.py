"""The exporter's YAML configuration, validated with line numbers (through ebpfkit.policy's
loader, like the guard's policies)::

    series_limit: 2000          # series per metric; beyond it the least recently updated goes
    pid_label: false            # a pid label on per-process series (off: one series per comm)
    sources:
      - source: runqlat         # then the source's settings: its tool's Config fields
      - source: iofsstat
        hook: auto
      - source: xdp_filter
        iface: eth1
        netns: web

A source's settings are its tool session's Config (the same names and checks as the CLI's
options), so a bad value is the same ConfigError, here located at its line (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from ..errors import ConfigError
from ..policy.loader import PolicyError, construct, load_yaml, node_line, read_text
from .labels import DEFAULT_SERIES_LIMIT

TOP_KEYS = ("sources", "series_limit", "pid_label")
DEFAULT_LISTEN = "127.0.0.1:9435"  # `ebpfkit exporter --listen`


@dataclass(frozen=True)
class SourceConfig:
    kind: str      # a key of sources.SOURCES
    options: object  # that source's Options (a ToolConfig)
    line: int


@dataclass(frozen=True)
class ExporterConfig:
    sources: tuple[SourceConfig, ...]
    series_limit: int = DEFAULT_SERIES_LIMIT
    pid_label: bool = False
    path: str = "<config>"


def load_config(path: str) -> ExporterConfig:
    return parse_config(read_text(path, "the configuration"), path)


def parse_config(text: str, path: str = "<config>") -> ExporterConfig:
    """PolicyError ("FILE:LINE: what is wrong") for anything wrong."""
    root = load_yaml(text, path)
    if root is None:
        raise PolicyError("empty configuration: name at least one source under 'sources'", None, path)
    top = _mapping(root, "the configuration", TOP_KEYS, path)
    if "sources" not in top:
        raise PolicyError("no 'sources': name at least one source", node_line(root), path)
    settings = {}
    for name, (_, node) in top.items():
        if name != "sources":
            settings[name] = _scalar(node, name, int if name == "series_limit" else bool, path)
    if settings.get("series_limit", 1) < 1:
        raise PolicyError(f"series_limit must be 1 or more, got {settings['series_limit']}",
                          node_line(top["series_limit"][1]), path)
    sources_node = top["sources"][1]
    if not isinstance(sources_node, yaml.SequenceNode) or not sources_node.value:
        raise PolicyError("'sources' must be a non-empty list of sources", node_line(sources_node), path)
    sources = tuple(_source(node, path) for node in sources_node.value)
    return ExporterConfig(sources, path=path, **settings)


def _mapping(node, what: str, allowed, path: str) -> dict:
    """{key: (key node, value node)} of a mapping node whose keys are all ``allowed`` (None: any)."""
    if not isinstance(node, yaml.MappingNode):
        raise PolicyError(f"{what} must be a mapping", node_line(node), path)
    items = {}
    for key, value in node.value:
        name = str(construct(key))
        if allowed is not None and name not in allowed:
            raise PolicyError(f"unknown key {name!r} in {what} (allowed: {', '.join(allowed)})",
                              node_line(key), path)
        if name in items:
            raise PolicyError(f"duplicate key {name!r} in {what}", node_line(key), path)
        items[name] = (key, value)
    return items


def _scalar(node, name: str, kind: type, path: str):
    value = construct(node)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PolicyError(f"{name} must be {'a whole number' if kind is int else 'true or false'}, "
                          f"got {value!r}", node_line(node), path)
    return value


def _source(node, path: str) -> SourceConfig:
    from .sources import SOURCES

    items = _mapping(node, "a source", None, path)
    if "source" not in items:
        raise PolicyError(f"a source needs 'source:' naming it ({', '.join(SOURCES)})", node_line(node), path)
    kind = construct(items.pop("source")[1])
    if kind not in SOURCES:
        raise PolicyError(f"unknown source {kind!r} (known: {', '.join(SOURCES)})", node_line(node), path)
    values = {name: construct(value) for name, (_, value) in items.items()}
    try:
        options = SOURCES[kind].Options.from_mapping(values)
    except ConfigError as exc:
        where = items.get(exc.field) or items.get(exc.field.replace("_", "-"))
        line = node_line(where[0]) if where is not None else node_line(node)
        raise PolicyError(f"source {kind}: {exc.field}: {exc.reason}", line, path) from None
    return SourceConfig(kind, options, node_line(node))

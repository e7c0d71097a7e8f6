"""ebpfkit's output layer: every tool prints through it (nothing else in ebpfkit prints).

    out = Output.from_context(ctx)
    out.banner("Tracing... Hit Ctrl-C to end.")
    with out.live():
        out.table(result_table)            # or out.histogram(h) / out.histograms([...])
    out.event({"pid": 42, "comm": "bash"})  # event streams

Names are loaded on first use so that ``import ebpfkit.output`` stays cheap (no rich, no click).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Output": "core",
    "OutputSettings": "settings",
    "FORMATS": "settings",
    "ResultTable": "table",
    "Column": "table",
    "MAX_TABLE_WIDTH": "table",
    "global_options": "options",
    "tool_options": "options",
    "install_settings": "options",
    "setup_logging": "logs",
    "get_logger": "logs",
    "log_event": "logs",
    "parse_size": "sizes",
    "RotatingLines": "rotating",
    "SIZE": "sizes",
    "describe_error": "errors",
    "report_failure": "errors",
    "invoke_cli": "errors",
    "run_cli": "errors",
    "Failure": "errors",
    "forward_output": "passthrough",
    "line_buffered_stdout": "passthrough",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .core import Output  # noqa: F401
    from .errors import Failure, describe_error, invoke_cli, report_failure, run_cli  # noqa: F401
    from .logs import get_logger, log_event, setup_logging  # noqa: F401
    from .passthrough import forward_output, line_buffered_stdout  # noqa: F401
    from .rotating import RotatingLines  # noqa: F401
    from .options import global_options, install_settings, tool_options  # noqa: F401
    from .settings import FORMATS, OutputSettings  # noqa: F401
    from .sizes import SIZE, parse_size  # noqa: F401
    from .table import MAX_TABLE_WIDTH, Column, ResultTable  # noqa: F401


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

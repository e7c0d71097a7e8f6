"""doctor: what this kernel allows, feature by feature and tool by tool.

``session`` is the tool (Config -> report() -> Report, as data); ``cli`` is `ebpfkit doctor`."""

from .session import Config, Report, ToolStatus, report

__all__ = ["Config", "Report", "ToolStatus", "report"]

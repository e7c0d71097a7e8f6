"""doctor: what this kernel allows, feature by feature and tool by tool.

``session`` is the tool (Config -> report() -> Report, as data); ``cli`` is `ebpfkit doctor`."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Report", "ToolStatus", "report"],
})

"""build: compile every program shipped with ebpfkit into prebuilt CO-RE objects.

``session`` is the tool (Config -> build() -> BuildResult); ``cli`` is `ebpfkit build`."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["BuildResult", "BuiltObject", "Config", "build"],
})

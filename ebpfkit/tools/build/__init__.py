"""build: compile every program shipped with ebpfkit into prebuilt CO-RE objects.

``session`` is the tool (Config -> build() -> BuildResult); ``cli`` is `ebpfkit build`."""

from .session import BuildResult, BuiltObject, Config, build

__all__ = ["BuildResult", "BuiltObject", "Config", "build"]

"""``bcc.containers``: the container filter BCC's tools put in front of their programs
(``--cgroupmap``, ``--mntnsmap``). Without those options nothing is filtered."""

from __future__ import annotations

from ..errors import NotSupportedError

_NO_FILTER = "static inline int container_should_be_filtered(void) { return 0; }\n"


def filter_by_containers(args) -> str:
    if getattr(args, "cgroupmap", None) or getattr(args, "mntnsmap", None):
        raise NotSupportedError("container filters", "--cgroupmap and --mntnsmap are not supported by "
                                "ebpfkit.bcc yet")
    return _NO_FILTER

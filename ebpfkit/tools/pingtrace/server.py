"""pingtrace's server side (`ebpfkit pingtrace -s`): this host's kernel still answers every
probe itself; the server only makes each reply carry this host's checkpoints of its request
(the request's backlog and receive on each device and namespace it crossed here, up to
PINGTRACE_MAX_ENTRIES - 1) and the moment the reply leaves the stack (tc egress of the device
it leaves by), written into the probe's padding (pingtrace.h's struct wire_entry). A client then sees the
far host's stages too, on that host's clock, which it corrects (session.ClockFilter)::

    from ebpfkit.tools.pingtrace import server
    with server.open(netns="srv", user_id=2) as s:
        time.sleep(10)
        s.replies_stamped                      # replies that left with their entries
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ...errors import ConfigError
from ..config import ToolConfig
from ..session import ToolSession, choose_typed_or_raw
from . import wire
from .session import PROGRAM, RAW_HOOK, TYPED_HOOK, skip_missing_tracepoints


@dataclass(frozen=True)
class Config(ToolConfig):
    netns: str | None = None   # the namespace whose devices the replies leave by (None: this one)
    user_id: int = 0           # --userid: names this host in the entries (clients tell hosts apart)

    def validate(self) -> None:
        if not 0 <= self.user_id < 1 << 32:
            raise ConfigError("user_id", f"must be 0 to {(1 << 32) - 1}, got {self.user_id}")
        if self.netns is not None:
            from ...net.netns import netns_path

            if not os.path.exists(netns_path(self.netns)):
                raise ConfigError("netns", f"no network namespace {self.netns!r}")


class Server(ToolSession):
    """Loaded and attached (tracepoints, and tc egress on every device of the namespace but
    loopback) until ``close()``."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        self._obj = None
        spec = compile_bpf(PROGRAM)
        typed_hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK)
        skip_missing_tracepoints(spec, typed_hook == TYPED_HOOK)
        self.hook = typed_hook + ", tc egress"
        spec.programs["pt_reply_out"].autoload = True
        spec.rodata.update({"server": True, "targ_session": 0, "user_id": config.user_id})
        self._obj = spec.load()
        try:
            wire.Layout(self._obj.btf)  # refuses a program whose probe wire.py cannot read
            self._obj.attach()
            self.devices = self._attach_egress()
        except BaseException:
            self.close()
            raise

    @property
    def replies_stamped(self) -> int:
        return int(self._obj.bss["replies_stamped"])

    def close(self) -> None:
        if self._obj is not None:
            self._obj.close()
            self._obj = None

    def _attach_egress(self) -> list[str]:
        """tc egress on each device of the namespace but loopback; their names."""
        program = self._obj.programs["pt_reply_out"]

        def attach_all():
            names = []
            for index, name in socket.if_nameindex():
                if name != "lo":
                    program.attach_tc(index, "egress")
                    names.append(name)
            return names

        if self.config.netns is None:
            return attach_all()
        from ...net.netns import in_netns

        return in_netns(self.config.netns, attach_all)


def open(config: Config | None = None, **settings) -> Server:  # noqa: A001 - the session verb
    return Server(Config.given(config, **settings))

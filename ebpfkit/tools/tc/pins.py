"""Where `tc redirect attach` and `tc ratelimit attach` leave their programs once the command
has exited: ``/sys/fs/bpf/ebpfkit/tc/redirect/`` for a node that is this (the initial) network
namespace, ``tc/redirect@NETNS/`` for one in a named namespace (bpffs is shared by all
namespaces); ``tc/ratelimit[@NETNS]/DEV/`` per paced device. A redirect set holds the maps
(``endpoints``, ``steering``, ``counters``), the program (``prog``) and one tcx link per device
the program runs on (``link-IFINDEX``); its record says the node's namespace, endpoints, uplinks
and steering. A ratelimit set holds ``rates``, ``prog`` and its ``link``; its record the rules'
keys and the qdisc the device had before fq. A foreground `run` pins nothing: the kernel
detaches its links when the process dies, however it dies.
"""

from __future__ import annotations

from ...engine.pinset import COMPLETE, NONE, PinSet
from ...errors import EbpfkitError

PROGRAM = "tc_redirect"


class NotAttachedError(EbpfkitError):
    exit_code = 1


class AlreadyAttachedError(EbpfkitError):
    exit_code = 1


def require_pinnable(command: str) -> None:
    """A program that outlives its command is held by pins: tcx links (6.6+) can be pinned, the
    clsact filters tc programs are attached as before cannot (exit 3, naming ``command``'s
    foreground `run`, which works there)."""
    from ...engine import features
    from ...errors import NotSupportedError

    if features.probe("tc").value != "tcx":
        raise NotSupportedError("tcx", "a tc program that outlives its command needs tcx links (6.6+), "
                                "which can be pinned: this kernel attaches tc programs as clsact filters",
                                hint=f"`ebpfkit tc {command} run` runs it in the foreground here")


def node_label(netns: str | None) -> str:
    return f"namespace '{netns}'" if netns else "this namespace"


def pin_set(netns: str | None, device: str | None = None) -> PinSet:
    """The redirect's pin set of the node, or (``device``) the ratelimit's of that device."""
    import os

    what = "redirect" if device is None else "ratelimit"
    where = f"tc/{what}@{os.path.basename(netns)}" if netns else f"tc/{what}"
    return PinSet(where if device is None else f"{where}/{device}")


def _what(netns: str | None, device: str | None) -> str:
    return f"tc redirect in {node_label(netns)}" if device is None else \
        f"tc ratelimit on {device} in {node_label(netns)}"


def link_name(ifindex: int) -> str:
    return f"link-{ifindex}"


def fresh_pin_set(netns: str | None, device: str | None = None) -> PinSet:
    """The pin set for a new `attach`: refuses a live one, clears a stale or partial one."""
    pins = pin_set(netns, device)
    state = pins.state()
    if state == COMPLETE:
        command = "tc detach" if device is None else f"tc ratelimit detach -d {device}"
        raise AlreadyAttachedError(f"{_what(netns, device)} is already attached (pinned at {pins.path})",
                                   hint=f"`ebpfkit {command}" + (f" --netns {netns}`" if netns else "`") + " first")
    if state != NONE:
        pins.remove()
    return pins


def attached_pin_set(netns: str | None, device: str | None = None) -> PinSet:
    """The pin set of a running `attach`; NotAttachedError saying what is there instead."""
    pins = pin_set(netns, device)
    state = pins.state()
    if state == NONE:
        raise NotAttachedError(f"{_what(netns, device)} is not attached",
                               hint="`ebpfkit tc " + ("redirect" if device is None else "ratelimit") +
                               " attach ...` first")
    if state != COMPLETE:
        raise NotAttachedError(f"tc redirect's pins at {pins.path} are {state} (a device gone, or an attach "
                               "that did not finish)", hint="`ebpfkit tc detach` removes them")
    return pins

"""Where `tc redirect attach` leaves its program once the command has exited:
``/sys/fs/bpf/ebpfkit/tc/redirect/`` for a node that is this (the initial) network namespace,
``tc/redirect@NETNS/`` for one in a named namespace (bpffs is shared by all namespaces). The
set holds the maps (``endpoints``, ``counters``), the program (``prog``) and one tcx link per
device the program runs on (``link-IFINDEX``); its record says the node's namespace, its
endpoints and uplinks. A foreground `run` pins nothing: the kernel detaches its links when
the process dies, however it dies.
"""

from __future__ import annotations

from ...engine.pinset import COMPLETE, NONE, PinSet
from ...errors import EbpfkitError

PROGRAM = "tc_redirect"


class NotAttachedError(EbpfkitError):
    exit_code = 1


class AlreadyAttachedError(EbpfkitError):
    exit_code = 1


def node_label(netns: str | None) -> str:
    return f"namespace '{netns}'" if netns else "this namespace"


def pin_set(netns: str | None) -> PinSet:
    import os

    return PinSet(f"tc/redirect@{os.path.basename(netns)}" if netns else "tc/redirect")


def link_name(ifindex: int) -> str:
    return f"link-{ifindex}"


def fresh_pin_set(netns: str | None) -> PinSet:
    """The pin set for a new `attach`: refuses a live one, clears a stale or partial one."""
    pins = pin_set(netns)
    state = pins.state()
    if state == COMPLETE:
        raise AlreadyAttachedError(f"tc redirect is already attached in {node_label(netns)} (pinned at "
                                   f"{pins.path})", hint="`ebpfkit tc detach" +
                                   (f" --netns {netns}`" if netns else "`") + " first")
    if state != NONE:
        pins.remove()
    return pins


def attached_pin_set(netns: str | None) -> PinSet:
    """The pin set of a running `attach`; NotAttachedError saying what is there instead."""
    pins = pin_set(netns)
    state = pins.state()
    if state == NONE:
        raise NotAttachedError(f"tc redirect is not attached in {node_label(netns)}",
                               hint="`ebpfkit tc redirect attach ...` first")
    if state != COMPLETE:
        raise NotAttachedError(f"tc redirect's pins at {pins.path} are {state} (a device gone, or an attach "
                               "that did not finish)", hint="`ebpfkit tc detach` removes them")
    return pins

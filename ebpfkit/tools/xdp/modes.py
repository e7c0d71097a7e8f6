"""XDP attach modes, as the user names them and as enum ek_xdp_mode (xdp_mode.h) does.
Light on purpose: the command line imports it for its --mode choices."""

from __future__ import annotations

MODES = ("native", "generic", "auto")  # how to attach: the enum ek_xdp_mode's enumerators


def mode_enumerator(mode: str) -> str:
    """The enum ek_xdp_mode (xdp_mode.h) enumerator of an attach mode: native -> EK_XDP_MODE_NATIVE."""
    return f"EK_XDP_MODE_{mode.upper()}"


def mode_name(value) -> str:
    """The attach mode a decoded enum ek_xdp_mode names (auto for a value it does not know)."""
    return value.name.removeprefix("EK_XDP_MODE_").lower() if value.name else "auto"

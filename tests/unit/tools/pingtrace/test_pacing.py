"""--mode: when each probe goes, on a simulated clock where every reply takes ``rtt``."""

from __future__ import annotations

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools.pingtrace.pacing import MODES, Pacer
from ebpfkit.tools.pingtrace.session import Config


def simulate(mode: str, interval: float, rtt: float, count: int) -> tuple[list[float], int]:
    """The send times of ``count`` probes, and the most ever unanswered at once."""
    pacer, now = Pacer(mode, interval, 0.0), 0.0
    sends: list[float] = []
    pending: dict[int, float] = {}  # seq -> when its reply comes
    most = 0
    while len(sends) < count or pending:
        for seq, at in sorted(pending.items(), key=lambda kv: kv[1]):
            if at <= now:
                pacer.finished(at)
                del pending[seq]
        if len(sends) == count and not pending:
            break
        if len(sends) < count and pacer.due(now, len(pending)):
            pending[len(sends)] = now + rtt
            sends.append(now)
            pacer.sent(now)
            most = max(most, len(pending))
            continue
        upcoming = list(pending.values())
        if len(sends) < count and not pacer.waits_for_reply(len(pending)):
            upcoming.append(pacer.next)
        now = min(upcoming)
    return sends, most


def test_compact_keeps_the_rate_with_replies_outstanding():
    sends, most = simulate("compact", 1.0, 5.0, 8)
    assert sends == [0, 1, 2, 3, 4, 5, 6, 7]
    assert most == 5


def test_pingpong_waits_an_interval_after_each_reply():
    sends, most = simulate("pingpong", 1.0, 5.0, 4)
    assert sends == [0, 6, 12, 18]
    assert most == 1


def test_auto_never_overlaps_but_does_not_add_a_gap():
    sends, most = simulate("auto", 1.0, 5.0, 4)
    assert sends == [0, 5, 10, 15]
    assert most == 1


@pytest.mark.parametrize("mode", ["auto", "compact"])
def test_with_fast_replies_auto_and_compact_send_at_the_interval(mode):
    assert simulate(mode, 1.0, 0.25, 4) == ([0, 1, 2, 3], 1)


def test_with_fast_replies_pingpong_still_counts_from_the_reply():
    assert simulate("pingpong", 1.0, 0.25, 3)[0] == [0, 1.25, 2.5]


def test_an_unknown_mode_is_a_config_error():
    assert "auto" in MODES
    with pytest.raises(ConfigError, match="mode"):
        Config(target="10.0.0.1", mode="burst").validate()

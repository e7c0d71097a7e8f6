"""sockmap's session from Python, as a notebook or the exporter uses it: a foreground
``sockmap.open()`` and ``sockmap.attached()`` over an `enable`d cgroup. Only child cgroups
the test creates, only loopback traffic.

Ground truth is what a process the test started inside the cgroup sent: it connects to
itself over TCP loopback, waits until the test saw both ends in the map, then sends a known
number of bytes each way and reports how many arrived intact."""

from __future__ import annotations

import os

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools import sockmap
from ebpfkit.tools.sockmap.core import pin_directory
from helpers import exchange_in, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="attaches sockops to a cgroup: needs root"),
]

def attached_programs(path: str) -> list[str]:
    from helpers import cgroup_programs

    return [p["name"] for p in cgroup_programs(path)]


def test_session_counts_the_bytes_a_process_in_the_cgroup_sent(child_cgroup):
    cg_id = os.stat(child_cgroup.path).st_ino
    with sockmap.open(cgroup=child_cgroup.path) as session:
        assert attached_programs(child_cgroup.path) == ["sockmap_sockops"]
        assert not os.path.exists(pin_directory(cg_id))  # the foreground form pins nothing
        start = session.sample()
        assert start["cgroup"] == child_cgroup.path and start["pinned"] is False
        assert start["sockets"] == 0 and start["bytes_redirected"] == 0
        result = exchange_in(child_cgroup, session)
        sample = session.sample()
        assert sample["bytes_redirected"] == result["sent"]
        assert sample["msgs_fallback"] == 0 and sample["sockets_added"] == 2
        assert wait_for(lambda: session.sample()["sockets"] == 0)  # the process closed both ends
    assert attached_programs(child_cgroup.path) == []
    assert not os.path.exists(pin_directory(cg_id))


def test_attached_reads_the_counters_of_an_enabled_cgroup(child_cgroup):
    with pytest.raises(sockmap.NotEnabledError) as nothing:
        sockmap.attached(child_cgroup.path)
    assert nothing.value.exit_code == 2 and "not enabled on" in str(nothing.value)
    sockmap.enable(child_cgroup.path, sockmap.Options(ports=()))
    try:
        sampler = sockmap.attached(child_cgroup.path)
        assert sampler.cgroup_id in [s.cgroup_id for s in sockmap.attached_all()]
        before = sampler.sample()
        assert before["pinned"] is True and before["cgroup"] == child_cgroup.path
        result = exchange_in(child_cgroup, sampler)
        assert sampler.sample()["bytes_redirected"] - before["bytes_redirected"] == result["sent"]
        assert sampler.sample()["msgs_fallback"] == before["msgs_fallback"]
    finally:
        sockmap.disable(child_cgroup.path)
    assert attached_programs(child_cgroup.path) == []


def test_a_bad_setting_is_a_config_error_and_attaches_nothing(child_cgroup):
    with pytest.raises(ConfigError) as bad:
        sockmap.open(cgroup=child_cgroup.path, max_sockets=1)
    assert bad.value.field == "max_sockets" and bad.value.exit_code == 2
    with pytest.raises(TypeError):
        sockmap.open(sockmap.Options(), cgroup=child_cgroup.path, ipv6=False)  # a Config or settings
    assert attached_programs(child_cgroup.path) == []

"""runqlat's settings without a kernel: what each grouping keeps a histogram per (the key the
BPF side is given), which settings clash, and how a container's row is labelled."""

from __future__ import annotations

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools.runqlat.session import (KEY_CGROUP, KEY_NONE, KEY_PIDNS, KEY_TGID, KEY_TID, Config,
                                           container_label)


@pytest.mark.parametrize("settings, key", [
    ({}, KEY_NONE), ({"per_process": True}, KEY_TGID), ({"per_thread": True}, KEY_TID),
    ({"per_pidns": True}, KEY_PIDNS), ({"by": "cgroup"}, KEY_CGROUP), ({"by": "container"}, KEY_CGROUP),
])
def test_each_grouping_has_its_key(settings, key):
    assert Config(**settings).key == key


@pytest.mark.parametrize("settings, field", [
    ({"per_process": True, "per_thread": True}, "per_thread"),
    ({"per_thread": True, "per_pidns": True}, "per_pidns"),
    ({"per_process": True, "by": "container"}, "by"),
    ({"per_pidns": True, "by": "cgroup"}, "by"),
])
def test_groupings_exclude_each_other(settings, field):
    with pytest.raises(ConfigError, match="cannot be combined with") as raised:
        Config(**settings)
    assert raised.value.field == field


def test_the_filters_combine_with_any_grouping(tmp_path):
    with pytest.raises(ConfigError, match=f"cgroup: {tmp_path} is not a cgroup v2 directory"):
        Config(by="cgroup", cgroup=str(tmp_path))  # checked, not refused as a clash
    assert Config(per_thread=True, pid=1).key == KEY_TID


@pytest.mark.parametrize("container, pod, label", [
    ("3f2a9c0e1b7d", "", "container = 3f2a9c0e1b7d"),
    ("3f2a9c0e1b7d", "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
     "container = 3f2a9c0e1b7d pod = 1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"),
    ("", "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d", "pod = 1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"),
    ("", "", "no container"),
])
def test_a_containers_row_names_it_and_its_pod(container, pod, label):
    assert container_label(container, pod) == label

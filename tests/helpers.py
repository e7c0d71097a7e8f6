"""Helpers every test directory shares (tests/conftest.py puts tests/ on sys.path, so
``from helpers import wait_for`` works from tests/unit, tests/integration and tests/vm, in
the VM guest too)."""

from __future__ import annotations

import json
import time


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds passed (False): for
    what the kernel does a little after the call that causes it (freeing, socket accounting)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def bpf_objects_held_by(pid: int) -> set[tuple[str, int]]:
    """The BPF programs, links and maps process ``pid`` holds, as ("prog"|"link"|"map", id)
    pairs (empty when it is gone): what it keeps loaded or attached. A link's program counts
    as held with it."""
    from ebpfkit.engine import inventory

    by_kind = inventory.held_by(pid)
    held = {(kind, i) for kind, ids in by_kind.items() for i in ids}
    for link_id in by_kind["link"]:
        info = inventory.link(link_id)
        if info is not None:
            held.add(("prog", info.prog_id))
    return held


def ek(capsys, *args) -> tuple[int, str, str]:
    """Run the ebpfkit CLI in-process, as `ebpfkit ARGS...`: (exit code, stdout, stderr)."""
    from ebpfkit.cli import cli
    from ebpfkit.output import invoke_cli

    capsys.readouterr()
    rc = invoke_cli(cli, [str(a) for a in args], prog_name="ebpfkit")
    out, err = capsys.readouterr()
    return rc, out, err


def ek_json(capsys, *args):
    """`ebpfkit --format json ARGS...`, which must succeed: its last JSON line, parsed."""
    rc, out, err = ek(capsys, "--format", "json", *args)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


def same_config_error(capsys, config_class, settings: dict, cli_args, option: str, message: str):
    """A bad value is one error whichever way the configuration was built: ``config_class(
    **settings)`` (a notebook) and ``config_class.from_mapping(settings)`` (a YAML file) raise
    the same ConfigError naming the setting, and `ebpfkit CLI_ARGS` exits 2 naming ``option``.
    Returns the ConfigError."""
    import pytest

    from ebpfkit.errors import ConfigError

    with pytest.raises(ConfigError) as direct:
        config_class(**settings)
    with pytest.raises(ConfigError) as mapped:
        config_class.from_mapping({k.replace("_", "-"): v for k, v in settings.items()})
    assert str(direct.value) == str(mapped.value)
    assert message in direct.value.reason and direct.value.field in settings
    rc, _, err = ek(capsys, *cli_args)
    assert rc == 2, err
    assert f"Invalid value for {option}: {direct.value.reason}" in err, err
    return direct.value

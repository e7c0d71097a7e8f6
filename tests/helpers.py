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


def signalled_run_leaves_nothing(args, sig, timeout: float = 60.0) -> None:
    """`ebpfkit ARGS` (a running tool, e.g. `hardirqs 1`) killed by ``sig`` once its banner
    is out: it held BPF links while running, and none of its programs, links or maps is
    left in the kernel after it is gone (SIGKILL too: its bpf_links die with its fds)."""
    import os
    import signal
    import subprocess
    import sys

    from ebpfkit.engine import inventory

    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", *map(str, args)], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        banner = ""
        for line in proc.stderr:
            banner += line
            if "Hit Ctrl-C" in line:
                break
        held = bpf_objects_held_by(proc.pid)
        assert any(kind == "link" for kind, _ in held), f"nothing attached: {held} {banner}"
        proc.send_signal(sig)
        rc = proc.wait(timeout=timeout)
        assert rc in (0, -sig, 128 + sig), (rc, proc.stderr.read())
        if sig != signal.SIGKILL:
            assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lookup = {"prog": inventory.program, "link": inventory.link, "map": inventory.map}
    assert wait_for(lambda: not [o for o in held if lookup[o[0]](o[1]) is not None], 5), \
        f"left in the kernel: {[o for o in held if lookup[o[0]](o[1]) is not None]}"

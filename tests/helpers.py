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


def still_in_kernel(held: set[tuple[str, int]], timeout: float = 10.0) -> set[tuple[str, int]]:
    """What of ``held`` (as bpf_objects_held_by gives it) is still in the kernel after up to
    ``timeout`` seconds (the kernel frees programs and maps after an RCU grace period)."""
    from ebpfkit.engine import inventory

    lookup = {"prog": inventory.program, "link": inventory.link, "map": inventory.map}

    def left():
        return {(kind, i) for kind, i in held if lookup[kind](i) is not None}

    wait_for(lambda: not left(), timeout, 0.05)
    return left()


class RunningTool:
    """`ebpfkit ARGS` in a child process, returned once its banner ("... Hit Ctrl-C to end.")
    is out, so it is tracing. ``stop(sig)`` ends it and returns its stdout; ``kill()`` is the
    cleanup a test's ``finally`` calls."""

    def __init__(self, *args: str):
        import os
        import subprocess
        import sys

        env = dict(os.environ, NO_COLOR="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pid = self.proc.pid
        self.banner = ""
        for line in self.proc.stderr:
            self.banner += line
            if "Hit Ctrl-C" in line:
                return
        self.stop()
        raise AssertionError(f"`ebpfkit {' '.join(args)}` did not start "
                             f"(exit {self.proc.returncode}): {self.stderr}")

    def stop(self, sig=None) -> str:
        """Send ``sig`` (default SIGINT, Ctrl-C) and wait; its stdout. ``returncode`` and
        ``stderr`` tell how it ended."""
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGINT)
        self.stdout, stderr = self.proc.communicate(timeout=30)
        self.stderr = self.banner + stderr
        self.returncode = self.proc.returncode
        return self.stdout

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def pinned_python(code: str, cpu: int):
    """A Python child running ``code`` pinned to ``cpu`` from its exec on, its stdin a pipe
    (for bytes that start or wake it)."""
    import os
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import os, sys, time\n" + code], stdin=subprocess.PIPE,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def spinner_code(seconds: float) -> str:
    """For pinned_python: wait for a byte on stdin, then burn the CPU for ``seconds`` of wall
    time and exit."""
    return f"""
os.read(0, 1)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    pass
"""


def schedstat(pid: int) -> tuple[int, int, int]:
    """The kernel's account of ``pid``'s main thread: (ns on CPU, ns waiting runnable in a
    run queue, times switched in). A zombie keeps it: read before reaping."""
    with open(f"/proc/{pid}/schedstat") as f:
        on_cpu, run_delay, pcount = map(int, f.read().split())
    return on_cpu, run_delay, pcount


def reap(proc) -> None:
    """End and reap a pinned_python child (for a test's cleanup)."""
    if proc.stdin and not proc.stdin.closed:
        proc.stdin.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)

"""`ebpfkit vm run --log FILE` keeps the run's outcome (the guest is stood in for: booting one
is the VM tests' business)."""

import json

import pytest

from ebpfkit.cli import cli
from ebpfkit.output import invoke_cli
from ebpfkit.vm import kernels
from ebpfkit.vm.runner import VMResult


@pytest.mark.parametrize("result, code", [
    (VMResult("exited", 3, "6.1.0-9-amd64", "tcg", 20.5, 15.25), 3),
    (VMResult("timeout", None, "6.1.0-9-amd64", "tcg", 30.0, None, timeout=30), 124),
])
def test_vm_run_logs_its_outcome(monkeypatch, tmp_path, result, code):
    import ebpfkit.vm

    monkeypatch.setattr(kernels, "resolve", lambda spec=None: kernels.Kernel("6.1", "/boot/vmlinuz-6.1"))
    monkeypatch.setattr(ebpfkit.vm, "run", lambda command, spec, on_output=None: result)
    log = tmp_path / "vm.log"
    assert invoke_cli(cli, ["--log", str(log), "vm", "run", "--", "uname", "-r"], prog_name="ebpfkit") == code
    records = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("tool") == "vm.run"]
    assert [{k: r[k] for k in ("kernel", "status", "exit_code", "boot_seconds", "seconds", "command")}
            for r in records] == [{"kernel": result.kernel, "status": result.status, "exit_code": result.exit_code,
                                   "boot_seconds": result.boot_seconds, "seconds": result.seconds,
                                   "command": ["uname", "-r"]}]

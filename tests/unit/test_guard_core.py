"""Guard user space that needs no kernel: key resolution, event decoding, the CLI check."""

import json
import os

from click.testing import CliRunner

from ebpfkit.guard import agent, core
from ebpfkit.policy import parse_guard_policy
from ebpfkit.tools.guard import guard


def test_kernel_dev_encoding():
    assert core.kernel_dev(os.makedev(8, 1)) == (8 << 20) | 1
    assert core.kernel_dev(os.makedev(259, 70000)) == (259 << 20) | 70000


def test_resolve_keys_by_inode(tmp_path):
    f = tmp_path / "secret"
    f.write_text("x")
    (tmp_path / "hard").hardlink_to(f)
    (tmp_path / "sym").symlink_to(f)
    exe = tmp_path / "bin" / "tool"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / "bin" / "data").write_text("not executable")
    policy = parse_guard_policy(
        f"protect: [{f}, {tmp_path}/hard, {tmp_path}/sym, {tmp_path}/missing]\n"
        f"trust:\n  - path: {tmp_path}/bin\n    inherit: true\n")
    protected, trusted, exe_map, warnings = core.resolve(policy)
    key = core.key_of(str(f))
    assert protected[key] == policy.protect[0].mask  # three names, one object
    assert core.key_of(f"{tmp_path}/hard") == key and core.key_of(f"{tmp_path}/sym") == key
    # every ancestor (but /) is protected against rename only, of itself only
    assert protected[core.key_of(str(tmp_path))] == 4 << core.SELF_SHIFT
    assert len(protected) == 1 + len(tmp_path.parts) - 1
    assert list(trusted.values()) == [core.TRUST_SELF | core.TRUST_INHERIT]
    assert core.key_of(str(exe)) in trusted
    assert len(warnings) == 1 and "missing" in warnings[0]


def test_event_layout_matches_header():
    # struct guard_event in programs/guard.h: 3 u64, 6 u32/s32, comm[16], name[128]
    assert agent.EVENT.size == 8 * 3 + 4 * 6 + 16 + 128


def test_logger_writes_json_lines(tmp_path):
    lines = []

    class Sink:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass

    log = agent.Logger(Sink(), {(1, 2): "/etc/secret"}, 1000.0)
    log(agent.EVENT.pack(5_000_000_000, 1, 2, os.getpid(), 0, 1, 1, -1, 0, b"sh", b"secret"))
    record = json.loads(lines[0])
    assert record["hook"] == "file_open" and record["operation"] == "write"
    assert record["verdict"] == "denied" and record["object"] == "/etc/secret"
    assert record["comm"] == "sh" and record["time"] == 1005.0
    assert record["exe"] == os.readlink("/proc/self/exe")


def test_check_command(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(f"protect: [{tmp_path}]\n")
    result = CliRunner().invoke(guard, ["check", str(good)])
    assert result.exit_code == 0 and "valid" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("protect:\n  - path: /a\n    deny: [wrte]\n")
    result = CliRunner().invoke(guard, ["check", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:3: unknown operation 'wrte'" in result.output
    missing = CliRunner().invoke(guard, ["check", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_status_when_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(core, "PIN_DIR", str(tmp_path / "none"))
    assert core.status() == {"state": "stopped"}
    assert core.stop() is False



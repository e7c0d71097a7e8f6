"""Guard user space that needs no kernel: key resolution, event decoding, the CLI check."""

import dataclasses
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from ebpfkit.cli import cli
from ebpfkit.engine.btftypes import codec
from ebpfkit.tools.guard import agent, core, logfile, session
from ebpfkit.sysinfo.devices import kernel_dev_of_stat
from ebpfkit.sysinfo.mounts import Mount, MountTable
from ebpfkit.output.errors import invoke_cli
from ebpfkit.policy import OPERATIONS, parse_guard_policy


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
    # ... and a trusted executable against writes (its inode carries the trust)
    assert protected[core.key_of(str(exe))] == 1
    assert len(protected) == 1 + len(tmp_path.parts) - 1 + 1
    assert list(trusted.values()) == [core.TRUST_SELF | core.TRUST_INHERIT]
    assert core.key_of(str(exe)) in trusted
    assert len(warnings) == 1 and "missing" in warnings[0]


def test_hardlinked_files_below_a_directory_are_keyed_themselves(tmp_path):
    d = tmp_path / "conf"
    (d / "sub").mkdir(parents=True)
    linked, single = d / "sub" / "linked", d / "single"
    linked.write_text("x")
    single.write_text("y")
    (tmp_path / "elsewhere").hardlink_to(linked)  # outside: no dentry walk from it reaches d
    res = core.resolve(parse_guard_policy(f"protect:\n  - path: {d}\n    deny: [read]\n"
                                          f"    allow: [unlink, rename, link, setattr]\n"))
    key = core.key_of(str(tmp_path / "elsewhere"))
    assert res.protected[key] == core.OPERATIONS["write"] | core.OPERATIONS["read"]
    assert res.labels[key] == {"object": str(d), "matched": str(linked)}
    assert core.key_of(str(single)) not in res.protected  # one link: the walk up finds d


def test_interpreters_known_and_named_by_inode(tmp_path):
    """The shells and interpreters installed here, and ld.so, are keyed by inode, the policy's
    own added; a copy of a shell is not one of them (another inode)."""
    known = core.known_interpreters()
    assert os.path.realpath("/bin/sh") in known and os.path.realpath(sys.executable) in known
    assert any("ld-linux" in p for p in known)
    assert all(os.access(p, os.X_OK) and open(p, "rb").read(4) == b"\x7fELF" for p in known)
    own = tmp_path / "tcl"
    own.write_bytes(b"")
    copy = tmp_path / "sh-copy"
    shutil.copy("/bin/sh", copy)
    res = core.resolve(parse_guard_policy(f"protect: [{tmp_path}]\ninterpreters: [{own}]\n"))
    assert core.key_of(str(own)) in res.interpreters and core.key_of("/bin/sh") in res.interpreters
    assert core.key_of(str(copy)) not in res.interpreters
    assert set(res.interpreters) == {core.key_of(p) for p in known} | {core.key_of(str(own))}
    assert res.counts()["interpreter_entries"] == len(res.interpreters)


def test_labels_name_the_protected_object(tmp_path):
    f = tmp_path / "d" / "secret"
    f.parent.mkdir()
    f.write_text("x")
    res = core.resolve(parse_guard_policy(f"protect: [{f}]\n"), [(str(tmp_path / "d"), 2)])
    assert res.labels[core.key_of(str(f))] == {"object": str(f)}
    # the directory is an extra rule of its own, which beats being f's ancestor
    assert res.labels[core.key_of(str(f.parent))] == {"object": str(f.parent)}
    # an ancestor only: the object it guards, and the directory that matched
    assert res.labels[core.key_of(str(tmp_path))] == {"object": str(f), "matched": str(tmp_path)}
    assert res.counts()["protected_entries"] == len(res.protected)


def test_key_of_is_the_kernel_view(tmp_path):
    """On a plain filesystem the kernel's (s_dev, i_ino) is stat()'s, re-encoded."""
    f = tmp_path / "f"
    f.write_text("")
    st = os.stat(f)
    assert core.key_of(str(f)) == (kernel_dev_of_stat(st.st_dev), st.st_ino)
    assert core.key_of("/proc/self") != core.key_of(str(f))


MOUNTINFO = (
    "22 1 0:21 / / ro,relatime - 9p /dev/root ro\n"
    "78 54 0:63 / /tmp/my\\040dir rw,relatime shared:1 - overlay ov "
    "rw,lowerdir=/l1:/l\\:2,upperdir=/u/u,workdir=/u/w\n"
    "90 22 8:1 /sub /mnt rw - ext4 /dev/sda1 rw\n")


def test_mount_table_and_overlay_options():
    table = MountTable(MOUNTINFO)
    overlay = table.by_id(78)
    assert (overlay.kernel_dev, overlay.root, overlay.point, overlay.fstype) == (63, "/", "/tmp/my dir", "overlay")
    assert overlay.super_options == "rw,lowerdir=/l1:/l\\:2,upperdir=/u/u,workdir=/u/w"
    assert table.by_id(90).kernel_dev == (8 << 20) | 1 and table.by_id(90).root == "/sub"
    assert table.by_id(5) is None
    opts = overlay.super_options
    assert core._overlay_option(opts, "lowerdir") == ["/l1", "/l:2"]
    assert core._overlay_option(opts, "upperdir") == ["/u/u"]
    assert core._overlay_option("rw", "upperdir") == []


def test_layer_paths(tmp_path):
    lower, upper, merged = tmp_path / "lo", tmp_path / "up", tmp_path / "m"
    for d in (lower / "dir", upper / "dir", merged / "dir"):
        d.mkdir(parents=True)
    (lower / "dir" / "both").write_text("l")
    (upper / "dir" / "both").write_text("u")
    (lower / "dir" / "gone").write_text("l")
    os.mknod(upper / "dir" / "gone", 0o600 | stat.S_IFCHR, 0)  # a whiteout
    (merged / "dir" / "both").write_text("m")
    mount = Mount(78, 1, (0, 63), "/", str(merged), "rw", "overlay", "ov",
                  f"rw,lowerdir={lower},upperdir={upper},workdir=/w")
    assert core.layer_paths(str(merged / "dir" / "both"), mount) == [
        str(upper / "dir" / "both"), str(lower / "dir" / "both")]
    assert core.layer_paths(str(merged / "dir" / "gone"), mount) == []
    assert core.layer_paths(str(merged), mount) == [str(upper), str(lower)]
    assert core.layer_paths(str(merged / "dir"), dataclasses.replace(mount, fstype="ext4")) == []


def test_filter_words_cover_every_key():
    keys = [(63 + i % 3, 1000 + 7 * i) for i in range(3000)]
    read = core.OPERATIONS["read"]
    words = core.filter_words({key: 1 if key[0] != 65 else read for key in keys})
    # and each device's (dev, 0); (dev, READ_MARK) for device 65, whose objects deny reads
    for key in keys + [(63, 0), (64, 0), (65, 0), (65, core.READ_MARK)]:
        bit = core.filter_bit(key)
        assert 0 <= bit < core.FILTER_WORDS * 64
        assert words[bit >> 6] >> (bit & 63) & 1
    # spread: 3000 keys touch many words (a constant hash would give one)
    assert len(words) > 2000
    # no read mark where no object's reads are denied (unless another key has its bit)
    others = {core.filter_bit(k) for k in keys + [(63, 0), (64, 0), (65, 0), (65, core.READ_MARK)]}
    for dev in (63, 64):
        bit = core.filter_bit((dev, core.READ_MARK))
        assert bit in others or not words.get(bit >> 6, 0) >> (bit & 63) & 1
    # the C expression, checked on one value: (ino ^ dev << 32) * MULT >> (64 - BITS)
    assert core.filter_bit((1, 2)) == (((2 ^ (1 << 32)) * core.FILTER_MULT) % 2**64) >> 44


def test_self_rules(tmp_path):
    rules = dict(core.self_rules(str(tmp_path / "p.yaml")))
    assert set(rules) == {core.PIN_DIR, core.STATE_DIR, str(tmp_path / "p.yaml")}
    assert all(mask == core.DEFAULT_MASK for mask in rules.values())


@pytest.fixture(scope="module")
def guard_btf():
    """The BTF of guard.bpf.c, compiled (not loaded: the host has no BPF-LSM)."""
    import ebpfkit

    spec = ebpfkit.compile(str(Path(core.__file__).with_name("guard.bpf.c")))
    yield spec.btf
    spec.close()


def test_filter_constants_match_header():
    # 64-bit constants, which clang 14 cannot put in an enum (no ENUM64): their text
    header = (Path(core.__file__).parent / "guard.h").read_text()
    assert f"#define GUARD_FILTER_BITS {core.FILTER_BITS}" in header
    assert f"#define GUARD_FILTER_MULT {core.FILTER_MULT:#X}ULL".replace("0X", "0x") in header
    assert f"#define GUARD_READ_MARK {core.READ_MARK:#x}ULL" in header
    assert f"#define GUARD_SELF_SHIFT {core.SELF_SHIFT} " in header


def test_python_copies_are_the_objects_enums(guard_btf):
    # a policy is parsed and resolved before any object is loaded, so these stay in Python
    ops = guard_btf.enum("guard_op", strip="GUARD_OP_")
    assert {name: ops[name] for name in OPERATIONS} == OPERATIONS
    assert guard_btf.enum("guard_trust") == {"GUARD_TRUST_SELF": core.TRUST_SELF,
                                             "GUARD_TRUST_INHERIT": core.TRUST_INHERIT}
    assert guard_btf.enum("guard_gen")["GUARD_GEN_POLICY"] == core.GEN_POLICY


def test_logger_writes_json_lines(tmp_path, guard_btf):
    path = str(tmp_path / "guard.log")
    labels = {(1, 2): "/etc/secret", (1, 3): {"object": "/etc/secret", "matched": "/etc"}}
    log = agent.Logger(logfile.RotatingLog(path, 1 << 20, 1), labels, 1000.0, guard_btf,
                       {("link", 7): "link_guard_file_open"})
    event = codec(guard_btf, guard_btf.find("guard_event", "struct"))
    fields = ("ts_ns", "dev", "ino", "pid", "target_pid", "hook", "op", "verdict", "sig", "bpf_cmd",
              "obj_id", "comm", "name")

    def event_of(*values):
        """A ring buffer record as the program writes it, decoded as the reader decodes it."""
        return event.decode(event.encode(dict(zip(fields, values))))

    def lines():
        return list(logfile.records(path))
    log(event_of(5_000_000_000, 1, 2, os.getpid(), 0, "GUARD_HOOK_FILE_OPEN", 1, -1, 0, 0, 0, "sh", "secret"))
    record = lines()[0]
    assert record["event"] == "violation"
    assert record["hook"] == "file_open" and record["operation"] == "write"
    assert record["verdict"] == "denied" and record["object"] == "/etc/secret"
    assert record["comm"] == "sh" and record["time"] == 1005.0
    assert record["exe"] == os.readlink("/proc/self/exe") and "matched" not in record
    # an ancestor's match names the protected object, and the directory that matched
    log(event_of(0, 1, 3, 1, 0, "GUARD_HOOK_INODE_RENAME", 4, -1, 0, 0, 0, "mv", "etc"))
    record = lines()[1]
    assert record["object"] == "/etc/secret" and record["matched"] == "/etc" and record["name"] == "etc"
    log(event_of(0, 0, 0, 1, 0, "GUARD_HOOK_BPF", 512, -1, 0, 34, 7, "bpftool", ""))
    record = lines()[2]
    assert record["hook"] == "bpf" and record["operation"] == "bpf"
    assert record["bpf_cmd"] == "BPF_LINK_DETACH" and record["link"] == "link_guard_file_open"
    log(event_of(0, 0, 0, 1, 0, "GUARD_HOOK_BPF_MAP", 512, -1, 0, 0, 9, "bpftool", "protected"))
    record = lines()[3]
    assert record["map"] == "protected" and record["map_id"] == 9 and "object" not in record


def test_log_rotates_by_size_and_reads_back_in_order(tmp_path):
    path = str(tmp_path / "guard.log")
    log = logfile.RotatingLog(path, 1000, 2)
    for i in range(60):  # ~40 bytes a line: about 25 per file
        log.write({"n": i, "pad": "x" * 20})
    files = sorted(os.listdir(tmp_path))
    assert files == ["guard.log", "guard.log.1", "guard.log.2"]
    assert all(os.path.getsize(tmp_path / f) <= 1000 for f in files)
    kept = [r["n"] for r in logfile.records(path)]
    assert kept == list(range(60 - len(kept), 60)) and len(kept) > 40  # the newest, in order
    log.resize(1000, 3)  # a reloaded policy may keep more
    for i in range(60, 120):
        log.write({"n": i, "pad": "x" * 20})
    assert os.path.exists(path + ".3") and not os.path.exists(path + ".4")
    log.close()


def test_log_follow_crosses_a_rotation(tmp_path):
    import threading

    path = str(tmp_path / "guard.log")
    log = logfile.RotatingLog(path, 400, 6)  # ~40 lines a file: 2 rotations, all kept
    log.write({"n": 0})
    seen = []
    follower = logfile.records(path, follow=True)

    def follow():
        for record in follower:
            seen.append(record["n"])
            if record["n"] == 99:
                return
    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    for i in range(1, 100):  # rotates several times while followed
        log.write({"n": i})
    thread.join(10)
    log.close()
    assert seen == list(range(100))


def test_policy_log_limits():
    policy = parse_guard_policy("protect: [/etc]\nlog: {size: 64K, backups: 5}\n")
    assert agent.log_limits(policy, (10, 1)) == (65536, 5)
    assert agent.log_limits(parse_guard_policy("protect: [/etc]\n"), (10, 1)) == (10, 1)


def test_watcher_reloads_and_keeps_the_old_policy_on_errors(monkeypatch, tmp_path, guard_btf):
    """The agent's policy watch: a changed file is installed, a bad one logged and skipped
    (once), a `guard reload` of the same content not installed twice."""
    state_dir, pins = tmp_path / "state", tmp_path / "pins"
    state_dir.mkdir()
    pins.mkdir()
    for name, value in (("PIN_DIR", pins), ("STATE_DIR", state_dir),
                        ("STATE_FILE", state_dir / "state.json"), ("LOG_FILE", state_dir / "guard.log"),
                        ("LOCK_FILE", state_dir / "lock")):
        monkeypatch.setattr(core, name, str(value))
    policy = tmp_path / "p.yaml"
    policy.write_text(f"protect: [{tmp_path}]\n")
    installed = []

    def install(parsed, path, sig, fds=None):
        installed.append(parsed.to_dict()["protect"][0]["path"])
        state = core.read_state()
        state.update(policy=path, applied=sig)
        core.write_state(state)
        return core.Resolution()

    monkeypatch.setattr(core, "install", install)
    _, sig = core.read_policy(str(policy))
    core.write_state({"mode": "enforce", "policy": str(policy), "applied": sig})
    log = logfile.RotatingLog(core.LOG_FILE, 1 << 20, 1)
    watcher = agent.Watcher({}, agent.Logger(log, {}, 0.0, guard_btf), (1 << 20, 1))
    watcher.check()
    assert list(logfile.records(core.LOG_FILE)) == []     # unchanged
    policy.write_text(f"protect: [{tmp_path / 'x'}]\n")
    watcher.check()
    lines = list(logfile.records(core.LOG_FILE))
    assert installed == [str(tmp_path / "x")]
    assert lines[-1]["object"] == str(policy) and lines[-1]["event"] == "policy-reload" and lines[-1]["verdict"] == "applied"
    policy.write_text("protect: [relative]\n")
    watcher.check()
    watcher.check()
    lines = list(logfile.records(core.LOG_FILE))
    assert installed == [str(tmp_path / "x")]        # the good one stays
    assert [line["verdict"] for line in lines] == ["applied", "rejected"]   # logged once
    assert "absolute path" in lines[-1]["error"] and "stays" in lines[-1]["error"]
    policy.unlink()
    watcher.check()
    lines = list(logfile.records(core.LOG_FILE))
    assert lines[-1]["verdict"] == "rejected" and "cannot read" in lines[-1]["error"]


def check(path, capsys) -> tuple[int, str]:
    """`ebpfkit guard check PATH` through the CLI's error layer: (exit code, all output)."""
    code = invoke_cli(cli, ["guard", "check", str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_check_command(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(f"protect:\n  - path: {tmp_path}\n    deny: [read]\n")
    code, output = check(good, capsys)
    assert code == 0 and "valid" in output
    # what each rule denies: the defaults and what it adds
    assert invoke_cli(cli, ["--format", "json", "guard", "check", str(good)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["protect"] == [{"path": str(tmp_path), "deny": ["write", "unlink", "rename", "link", "setattr",
                                                                  "read"]}]
    assert record["resolved"]["interpreters"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("protect:\n  - path: /a\n    deny: [wrte]\n")
    code, output = check(bad, capsys)
    assert code == 2
    assert f"Error: {bad}:3: unknown operation 'wrte'" in output
    code, output = check(tmp_path / "nope.yaml", capsys)
    assert code == 2 and "cannot read the policy: No such file or directory" in output
    assert "Traceback" not in output and "[Errno" not in output


def test_status_when_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(core, "PIN_DIR", str(tmp_path / "none"))
    assert session.status() == {"state": "stopped"}
    with pytest.raises(session.NotRunningError, match="the guard is not running") as nothing:
        session.attached()
    assert nothing.value.hint == "ebpfkit guard start POLICY"
    assert core.stop() is False



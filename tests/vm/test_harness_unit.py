"""The VM harness's pieces without booting anything: kernel discovery, the vng command line
and guest script, how results are described, missing packages, and the CLI's exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.errors import ConfigError, NotSupportedError
from ebpfkit.output import invoke_cli
from ebpfkit.vm import VMResult, VMSpec, host, kernels, runner


@pytest.fixture(autouse=True)
def no_unpacked_kernels(monkeypatch, tmp_path):
    """This machine's /var/lib/ebpfkit/kernels stays out of the fake /boot trees."""
    monkeypatch.setattr(kernels, "UNPACKED_DIR", str(tmp_path / "unpacked"))


def fake_boot(tmp_path, *releases, modules=True, lsm=None):
    boot, mods = tmp_path / "boot", tmp_path / "modules"
    boot.mkdir(exist_ok=True)
    for release in releases:
        (boot / f"vmlinuz-{release}").write_bytes(b"not really a kernel")
        if lsm is not None:
            (boot / f"config-{release}").write_text(f'CONFIG_BPF_LSM=y\nCONFIG_LSM="{lsm}"\n')
        if modules:
            (mods / release).mkdir(parents=True)
            (mods / release / "modules.dep").write_text("")
    return str(boot), str(mods)


def test_kernels_newest_first_and_the_default_has_modules(tmp_path):
    boot, mods = fake_boot(tmp_path, "5.10.0-9-amd64", "6.1.0-56-amd64", "6.1.0-9-amd64")
    found = kernels.find_kernels(boot, mods)
    assert [k.release for k in found] == ["6.1.0-56-amd64", "6.1.0-9-amd64", "5.10.0-9-amd64"]
    assert kernels.resolve(None, boot, mods).release == "6.1.0-56-amd64"
    assert kernels.resolve("5.10", boot, mods).release == "5.10.0-9-amd64"
    assert kernels.resolve("6.1.0-9-amd64", boot, mods).release == "6.1.0-9-amd64"


def test_unpacked_kernels_of_other_releases_are_found_with_their_modules(tmp_path):
    """scripts/debian-kernel.sh's roots: boot/ and lib/modules/ side by side; an installed
    kernel of the same release wins; a half-unpacked root is not a kernel."""
    boot, mods = fake_boot(tmp_path, "6.1.0-56-amd64")
    unpacked = tmp_path / "unpacked"
    for release in ("5.10.0-32-amd64", "6.1.0-56-amd64"):
        root = unpacked / release
        (root / "boot").mkdir(parents=True)
        (root / "boot" / f"vmlinuz-{release}").write_bytes(b"x")
        (root / "boot" / f"config-{release}").write_text('CONFIG_LSM="lockdown,yama"\n')
        (root / "lib" / "modules" / release).mkdir(parents=True)
        (root / "lib" / "modules" / release / "modules.dep").write_text("")
    (unpacked / "4.19.0-1-amd64.partial" / "boot").mkdir(parents=True)
    (unpacked / "4.19.0-1-amd64.partial" / "boot" / "vmlinuz-4.19.0-1-amd64").write_bytes(b"x")
    found = kernels.find_kernels(boot, mods)
    assert [k.release for k in found] == ["6.1.0-56-amd64", "5.10.0-32-amd64"]
    assert found[0].image == f"{boot}/vmlinuz-6.1.0-56-amd64"
    old = kernels.resolve("5.10", boot, mods)
    assert old.modules == str(unpacked / "5.10.0-32-amd64" / "lib" / "modules" / "5.10.0-32-amd64")
    assert old.lsm_list() == "lockdown,yama,bpf"  # its own config, beside its image
    by_path = kernels.resolve(str(unpacked / "5.10.0-32-amd64" / "boot" / "vmlinuz-5.10.0-32-amd64"), boot, mods)
    assert by_path.modules == old.modules
    with pytest.raises(NotSupportedError) as exc:
        kernels.resolve("4.19", boot, mods)
    assert "scripts/debian-kernel.sh" in exc.value.hint


def test_unknown_or_missing_kernel_names_the_package(tmp_path):
    boot, mods = fake_boot(tmp_path, "6.1.0-56-amd64")
    with pytest.raises(NotSupportedError) as exc:
        kernels.resolve("6.11", boot, mods)  # a prefix must end at a "." or "-"
    assert "linux-image-amd64" in exc.value.hint
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotSupportedError) as exc:
        kernels.resolve(None, str(empty), mods)
    assert "apt-get install linux-image-amd64" in exc.value.hint


def test_a_kernel_without_modules_is_refused(tmp_path):
    boot, mods = fake_boot(tmp_path, "6.1.0-56-amd64", modules=False)
    with pytest.raises(NotSupportedError) as exc:
        kernels.resolve("6.1", boot, mods)
    assert "linux-image-6.1.0-56-amd64" in exc.value.hint


def test_lsm_list_keeps_the_kernels_own_and_adds_bpf(tmp_path):
    boot, mods = fake_boot(tmp_path, "6.1.0-56-amd64", lsm="landlock,lockdown,yama")
    assert kernels.resolve(None, boot, mods).lsm_list() == "landlock,lockdown,yama,bpf"
    assert kernels.Kernel("x", "/nonexistent").lsm_list() == kernels.FALLBACK_LSMS


def test_image_release_reads_the_bzimage_header(tmp_path):
    image = bytearray(0x600)
    image[0x202:0x206] = b"HdrS"
    image[0x20E:0x210] = (0x300).to_bytes(2, "little")  # version string at 0x300 + 0x200
    version = b"6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP\0"
    image[0x500:0x500 + len(version)] = version
    path = tmp_path / "bzImage"
    path.write_bytes(bytes(image))
    assert kernels.image_release(path) == "6.1.0-56-amd64"
    path.write_bytes(b"\0" * 0x600)
    assert kernels.image_release(path) is None


def _spec(**kw):
    return VMSpec(kernels.Kernel("6.1.0-56-amd64", "/boot/vmlinuz-6.1.0-56-amd64"), **kw)


def test_vng_command_line():
    argv = runner._vng_argv("/v/vng", _spec(lsm=True, memory="1G", cpus=2), "tcg", "/tmp/r", "/tmp/r/guest.sh",
                            "/var/cache/ebpfkit")
    assert argv[0] == "/v/vng" and "--run=/boot/vmlinuz-6.1.0-56-amd64" in argv
    assert "--disable-kvm" in argv and "--force-9p" in argv and "--memory=1G" in argv and "--cpus=2" in argv
    append = next(a for a in argv if a.startswith("--append="))
    assert runner.GUEST_MARK in append and "console=hvc0" in append and f"lsm={kernels.FALLBACK_LSMS}" in append
    assert "softlockup_panic=1" in append.split()  # a wedged guest ends as a panic, not at the timeout
    # a frozen one as a panic too, on the NMI sent through our monitor, printing every CPU's stack
    assert {"unknown_nmi_panic=1", "panic_print=0x40"} <= set(append.split())
    opts = next(a for a in argv if a.startswith("--qemu-opts="))
    assert "path=/tmp/r/monitor.sock,server=on,wait=off -mon chardev=ebpfkitmon" in opts
    assert "--rwdir=/tmp/r" in argv and "--rodir=/run/ebpfkit-vm/host-cache=/var/cache/ebpfkit" in argv
    assert argv[-1] == "--exec=sh /tmp/r/guest.sh"
    kvm = runner._vng_argv("/v/vng", _spec(), "kvm", "/tmp/r", "/tmp/r/guest.sh", None)
    assert "--disable-kvm" not in kvm and not any(a.startswith("--rodir") for a in kvm)
    assert not any("lsm=" in a for a in kvm)


def test_guest_script_records_start_and_exit_status(tmp_path):
    env = {"EBPFKIT_IN_VM": "1", "EBPFKIT_CACHE_DIR": "/var/cache/ebpfkit", "X": "a b"}
    path = runner._write_script(str(tmp_path), ["python", "-c", "print('hi there')"], env, _spec(cwd="/work"))
    text = open(path).read()
    assert f": > {tmp_path}/started" in text
    assert f"{runner.HEARTBEAT_NAME} {tmp_path}/heartbeat </dev/null >/dev/null 2>&1 &" in text
    assert "export X='a b'" in text and "export EBPFKIT_IN_VM=1" in text
    assert "mount -t overlay" in text and "lowerdir=/run/ebpfkit-vm/host-cache" in text
    assert "python -c 'print('\"'\"'hi there'\"'\"')'" in text
    assert f"echo $rc > {tmp_path}/exit" in text and text.rstrip().endswith("exit $rc")


def test_a_scratch_disk_is_an_empty_ext4_on_virtio_blk_and_the_commands_tmpdir(tmp_path):
    argv = runner._vng_argv("/v/vng", _spec(scratch="64M"), "tcg", str(tmp_path), f"{tmp_path}/guest.sh", None)
    image = tmp_path / "scratch.img"
    opts = next(a for a in argv if a.startswith("--qemu-opts="))
    assert f"-drive file={image},format=raw,if=none,id=ebpfkitscratch" in opts
    assert f"-device virtio-blk-pci,drive=ebpfkitscratch,serial={runner.SCRATCH_SERIAL}" in opts
    assert image.stat().st_size == 64 << 20 and image.stat().st_blocks * 512 < 64 << 20  # sparse
    probe = subprocess.run(["blkid", "-o", "value", "-s", "TYPE", str(image)], capture_output=True, text=True)
    assert probe.stdout.strip() == "ext4", probe
    text = open(runner._write_script(str(tmp_path), ["true"], {}, _spec(scratch="64M"))).read()
    assert f"mount /dev/${{b##*/}} {runner.SCRATCH_MOUNT}" in text and f"export TMPDIR={runner.SCRATCH_MOUNT}" in text
    assert f"echo 125 > {tmp_path}/exit; exit 125" in text  # no disk: the run fails, saying so
    assert runner.SCRATCH_MOUNT not in open(runner._write_script(str(tmp_path), ["true"], {}, _spec())).read()


@pytest.mark.parametrize("size", ["1", "0G", "big", "1T", "-1G"])
def test_a_scratch_size_that_is_not_one_is_a_usage_error(tmp_path, size):
    with pytest.raises(ConfigError, match="not a disk size"):
        runner._vng_argv("/v/vng", _spec(scratch=size), "tcg", str(tmp_path), f"{tmp_path}/guest.sh", None)
    assert not (tmp_path / "scratch.img").exists()


def _watched(rundir, finish: bool) -> int:
    """A child that starts a session (as vng) under an _OrphanWatch, then either says done or
    is SIGKILLed; the session's pid."""
    import signal
    import time

    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        watch = runner._OrphanWatch(str(rundir))
        group = subprocess.Popen(["sleep", "60"], start_new_session=True)
        watch.started(group.pid)
        os.write(write, f"{group.pid}\n".encode())
        if finish:
            watch.done()
        time.sleep(60)
        os._exit(0)
    os.close(write)
    group = int(os.read(read, 64))
    os.close(read)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    return group


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_runner_leaves_neither_its_vm_nor_its_directory(tmp_path):
    import time

    rundir = tmp_path / "ebpfkit-vm-x"
    rundir.mkdir()
    group = _watched(rundir, finish=False)  # SIGKILLed: no cleanup of its own ran
    deadline = time.monotonic() + 10
    while (_alive(group) or rundir.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(group) and not rundir.exists()
    # one that finished its cleanup is left alone: what it ran is its own business
    rundir.mkdir()
    group = _watched(rundir, finish=True)
    time.sleep(1)
    try:
        assert _alive(group) and rundir.exists()
    finally:
        os.killpg(group, 9)


PANIC_CONSOLE = "\n".join(["[ 1.0] booting"] * 50 + [
    "[14.6] sysrq: Trigger a crash", "[14.6] Kernel panic - not syncing: sysrq triggered crash",
    "[14.6] CPU: 1 PID: 249 Comm: sh"] + ["[14.7]  frame"] * 60)


OOPS_CONSOLE = "\n".join(["[ 1.0] booting"] * 50 + [
    "[415.1] BUG: unable to handle page fault for address: 00007f49a495a206",
    "[415.1] RIP: 0010:some_function+0x12/0x80"] + ["[415.3]  frame"] * 5 + [
    "[415.7] Kernel panic - not syncing: Fatal exception in interrupt"])


def test_the_heartbeat_stops_after_the_limit_of_silence_counted_from_its_first_beat(tmp_path, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: now[0])
    path = tmp_path / "heartbeat"
    beat = runner._Heartbeat(str(path), 150.0)
    now[0] += 1000
    assert not beat.stopped()  # no beat yet: still booting
    for text in ("1.0", "6.0"):
        path.write_text(text)
        assert not beat.stopped()
        now[0] += 149
        assert not beat.stopped()  # the same beat, read again: 149 s of silence
    now[0] += 1
    assert beat.stopped() and beat.frozen and beat.silent_for == 150


def test_describe_a_panic_starts_at_the_oops_that_led_to_it():
    text = VMResult("panic", None, "6.12", "tcg", 420.0, 14.0, console=OOPS_CONSOLE).describe()
    assert "BUG: unable to handle page fault" in text and "RIP: 0010:some_function" in text, text
    assert "Fatal exception in interrupt" in text and text.count("booting") == 2, text  # 2 lines of context


def test_a_new_boot_after_a_panic_keeps_only_the_finished_tests_records(tmp_path):
    import json

    from ebpfkit.vm.plugin import _keep_finished

    records = [{"event": "session", "kernel": "6.12"}, {"event": "start", "nodeid": "t::a"},
               *({"event": "report", "data": {"nodeid": "t::a", "when": w}} for w in ("setup", "call", "teardown")),
               {"event": "start", "nodeid": "t::b"}, {"event": "report", "data": {"nodeid": "t::b", "when": "setup"}}]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"event": "rep')  # cut by the panic
    _keep_finished(str(path), {"t::a"})
    assert [json.loads(line) for line in path.read_text().splitlines()] == records[:5]
    _keep_finished(str(tmp_path / "none.jsonl"), set())  # no results file: nothing to keep, no error


def test_describe_a_panic_shows_the_console_from_the_panic_on():
    result = VMResult("panic", None, "6.1.0-56-amd64", "tcg", 20.0, 15.0, console=PANIC_CONSOLE)
    text = result.describe()
    assert "guest kernel 6.1.0-56-amd64 panicked" in text
    assert "Kernel panic - not syncing: sysrq triggered crash" in text
    assert text.count("booting") == 1  # from just before the panic, not the console's last 40 lines


def test_describe_a_timeout():
    during = VMResult("timeout", None, "6.1", "tcg", 30.5, 18.0, timeout=30).describe()
    assert "killed after 30 s" in during and "had run for 12 s" in during
    booting = VMResult("timeout", None, "6.1", "tcg", 10.2, None, timeout=10).describe()
    assert "not started yet" in booting


def test_missing_host_pieces_name_their_packages(monkeypatch):
    monkeypatch.setattr(host.shutil, "which", lambda *a, **k: None)
    for find, package in ((host.find_qemu, "apt-get install qemu-system-x86"),
                          (host.find_busybox, "apt-get install busybox-static"),
                          (host.find_vng, "pip install virtme-ng")):
        with pytest.raises(NotSupportedError) as exc:
            find()
        assert package in exc.value.hint


def test_accel_choice(monkeypatch):
    monkeypatch.setattr(host, "kvm_usable", lambda image=None: (False, "no /dev/kvm"))
    assert host.choose_accel("auto")[0] == "tcg"
    assert host.choose_accel("tcg")[0] == "tcg"
    with pytest.raises(NotSupportedError):
        host.choose_accel("kvm")
    monkeypatch.setattr(host, "kvm_usable", lambda image=None: (True, "KVM works"))
    assert host.choose_accel("auto")[0] == "kvm"


@pytest.mark.parametrize("result, code, words", [
    (VMResult("exited", 3, "6.1", "tcg", 20, 15), 3, []),
    (VMResult("timeout", None, "6.1", "tcg", 30, 15, timeout=30), 124, ["timed out"]),
    (VMResult("panic", None, "6.1", "tcg", 20, 15, console=PANIC_CONSOLE), 125, ["panicked", "sysrq"]),
    (VMResult("died", None, "6.1", "tcg", 1, None, stderr_tail="qemu: cannot boot"), 125, ["cannot boot"]),
])
def test_cli_exit_status_follows_the_guest(monkeypatch, capsys, result, code, words):
    import ebpfkit.vm

    monkeypatch.setattr(kernels, "resolve", lambda spec=None: kernels.Kernel("6.1", "/boot/vmlinuz-6.1"))
    monkeypatch.setattr(ebpfkit.vm, "run", lambda command, spec, on_output=None: result)
    assert invoke_cli(cli, ["vm", "run", "--", "true"]) == code
    err = capsys.readouterr().err
    for word in words:
        assert word in err
    assert "Traceback" not in err


def test_cli_lists_kernels():
    out = CliRunner().invoke(cli, ["--format", "json", "vm", "kernels"])
    assert out.exit_code == 0, out.output
    assert '"release"' in out.output or "no kernel" in out.output


# --- kernel=[...]: one variant per kernel, grouped per kernel ---------------------------

MULTI_KERNEL = '''
import pytest

pytestmark = pytest.mark.vm(kernel=["6.1", "6.12"])

def test_both():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_both_parametrized(n):
    pass

@pytest.mark.vm(kernel="6.12")
def test_one():
    pass

@pytest.mark.vm(kernel=["6.12", "6.12"], lsm=True)
def test_lsm(ebpfkit_vm_kernel):
    pass

@pytest.mark.vm
def test_default():
    pass

@pytest.mark.vm(kernel="6.1", lsm=False)
def test_without_lsm():
    pass
'''


class _Collected:
    """Keeps the nested session's scheduler and items (--collect-only: nothing boots)."""

    def pytest_collection_finish(self, session):
        self.scheduler = session.config.pluginmanager.get_plugin("ebpfkit-vm-scheduler")
        self.items = list(session.items)


def collect_nested(tmp_path, monkeypatch, source, *args):
    boot, mods = fake_boot(tmp_path, "6.1.0-56-amd64", "6.12.117+deb12-amd64")
    real = kernels.resolve
    monkeypatch.setattr(kernels, "resolve", lambda spec=None: real(spec, boot, mods))
    path = tmp_path / f"test_{tmp_path.name}.py"  # a module name of its own: in-process sessions share imports
    path.write_text(source)
    collected = _Collected()
    code = pytest.main([str(path), "--collect-only", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), *args], plugins=[collected])
    return code, collected


def test_a_kernel_list_makes_one_variant_per_kernel_in_that_kernels_group(tmp_path, monkeypatch):
    from ebpfkit.vm.plugin import wanted_kernel

    code, got = collect_nested(tmp_path, monkeypatch, MULTI_KERNEL)
    assert code == 0
    names = {i.name: wanted_kernel(i) for i in got.items}
    assert names == {"test_both[6.1]": "6.1", "test_both[6.12]": "6.12",
                     "test_both_parametrized[6.1-1]": "6.1", "test_both_parametrized[6.1-2]": "6.1",
                     "test_both_parametrized[6.12-1]": "6.12", "test_both_parametrized[6.12-2]": "6.12",
                     "test_one": "6.12", "test_lsm[6.12]": "6.12", "test_default": None,
                     "test_without_lsm": "6.1"}
    groups = {(os.path.basename(key[0]), key[1]): [i.name for i in g.items] for key, g in got.scheduler.groups.items()}
    # test_default has no kernel: the newest installed, the same boot as 6.12's; the tests that do
    # not say lsm join 6.12's BPF-LSM boot, and 6.1 has none; lsm=False is a boot without it
    assert groups == {
        ("vmlinuz-6.1.0-56-amd64", False): ["test_both[6.1]", "test_both_parametrized[6.1-1]",
                                            "test_both_parametrized[6.1-2]", "test_without_lsm"],
        ("vmlinuz-6.12.117+deb12-amd64", True): ["test_both[6.12]", "test_both_parametrized[6.12-1]",
                                                 "test_both_parametrized[6.12-2]", "test_one", "test_lsm[6.12]",
                                                 "test_default"]}
    # the guest is given its own variants' node ids, which its collection reproduces
    group = next(g for g in got.scheduler.groups.values() if g.kernel.release.startswith("6.1.0"))
    argv = got.scheduler._guest_command(group, "/tmp/results.jsonl")
    assert [a for a in argv if "::" in a] == [i.nodeid for i in group.items]
    assert all(a.endswith(("[6.1]", "-1]", "-2]", "test_without_lsm")) and "6.12" not in a for a in argv if "::" in a)


def test_a_variant_for_another_kernel_skips_in_the_guest(tmp_path, monkeypatch):
    from ebpfkit.vm import plugin

    code, got = collect_nested(tmp_path, monkeypatch, MULTI_KERNEL)
    item = next(i for i in got.items if i.name == "test_both[6.12]")
    monkeypatch.setattr("ebpfkit.vm.runner.in_vm", lambda: True)
    monkeypatch.setattr("ebpfkit.vm.results.active_lsms", lambda: "lockdown,capability,bpf")
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "vm", "6.1.0-56-amd64", "#1", "x86_64")))
    with pytest.raises(pytest.skip.Exception, match="wants kernel 6.12, this VM runs 6.1.0-56-amd64"):
        plugin.pytest_runtest_setup(item)
    plugin.pytest_runtest_setup(next(i for i in got.items if i.name == "test_both[6.1]"))  # runs


@pytest.mark.parametrize("bad", ["[]", "[6.10]", "['6.1', None]"])
def test_a_kernel_list_must_name_kernels_as_strings(tmp_path, monkeypatch, capsys, bad):
    source = f"import pytest\n\n@pytest.mark.vm(kernel={bad})\ndef test_x():\n    pass\n"
    code, _ = collect_nested(tmp_path, monkeypatch, source)
    assert code != 0
    out = capsys.readouterr()
    assert "needs a non-empty list of strings" in out.out + out.err


def test_a_boot_that_never_reached_the_command_is_booted_once_more(monkeypatch, caplog):
    """In run() itself, so ``ebpfkit vm run`` and the plugin both have it: a boot that never
    reached the command (a KVM emulation failure and a TCG int3 oops were seen) is retried once;
    a second failure is returned as it is, and a command that started is never run again."""
    monkeypatch.setattr(host, "require", lambda: "vng")
    monkeypatch.setattr(host, "choose_accel", lambda accel, image=None: ("tcg", "test"))
    died = VMResult("died", None, "6.12", "kvm", 5.0, None, stderr_tail="KVM internal error")
    panicked = VMResult("panic", None, "6.12", "tcg", 4.5, None, console="Oops: int3")
    exited = VMResult("exited", 1, "6.12", "tcg", 50.0, 30.0)
    mid_run_panic = VMResult("panic", None, "6.12", "tcg", 40.0, 30.0, console="Kernel panic - not syncing")
    spec = VMSpec(kernels.Kernel("6.12", "/boot/vmlinuz-6.12", None, None, None))
    for outcomes, boots in (([died, exited], 2), ([died, died], 2), ([exited], 1), ([panicked, exited], 2),
                            ([panicked, panicked], 2), ([mid_run_panic], 1),
                            ([VMResult("died", None, "6.12", "kvm", 40.0, 30.0)], 1)):
        calls = []
        monkeypatch.setattr(runner, "_boot", lambda vng, command, spec, accel, on_output: calls.append(command)
                            or outcomes[len(calls) - 1])
        caplog.clear()
        got = runner.run(["true"], spec)
        assert len(calls) == boots and got.boots == boots
        assert (got.status, got.boot_seconds) == (outcomes[-1].status, outcomes[-1].boot_seconds)
        assert any("booting it once more" in r.getMessage() for r in caplog.records) == (boots == 2)


def test_a_guest_that_panicked_or_froze_mid_run_is_booted_once_more_for_the_unfinished(tmp_path, monkeypatch):
    """The plugin boots a guest that panicked or froze while tests ran once more, for the tests
    that had not finished; a second crash is reported as it is, and so is a boot that never reached the
    tests (run() has booted it twice), a test's own failure and a guest that died mid-run."""
    monkeypatch.setattr(host, "require", lambda: None)
    code, got = collect_nested(tmp_path, monkeypatch, MULTI_KERNEL)
    exited = VMResult("exited", 1, "6.12", "kvm", 50.0, 30.0)
    never_started = VMResult("panic", None, "6.12", "tcg", 4.5, None, console="Kernel panic - not syncing")
    retried = VMResult("exited", 0, "6.12", "tcg", 50.0, 30.0, boots=2)  # run() booted twice
    mid_run_panic = VMResult("panic", None, "6.12", "tcg", 40.0, 30.0, console="Kernel panic - not syncing")
    frozen = VMResult("frozen", None, "6.1", "tcg", 200.0, 30.0, console="NMI: Not continuing", silent_for=150.0)
    for outcomes, boots in (([exited], 1), ([never_started], 1), ([retried], 1), ([mid_run_panic, exited], 2),
                            ([mid_run_panic, mid_run_panic], 2), ([frozen, exited], 2), ([frozen, frozen], 2),
                            ([VMResult("died", None, "6.12", "kvm", 40.0, 30.0)], 1)):
        calls = []
        monkeypatch.setattr(runner, "run", lambda command, spec, on_output=None: calls.append(spec)
                            or outcomes[len(calls) - 1])
        group = next(iter(got.scheduler.groups.values()))
        said = []
        monkeypatch.setattr(got.scheduler, "_say", said.append)
        got.scheduler._boot(group)
        assert len(calls) == boots and group.vm is outcomes[-1]
        assert any("booting it once more" in line for line in said) == (boots == 2), said
        assert any("booted it once more" in line for line in said) == (outcomes[0] is retried), said


def test_the_background_booter_hands_each_boot_to_the_test_loop(tmp_path, monkeypatch):
    """The groups boot in a forked process while the host's tests run: the test loop gets each
    group's result and the booter's lines from it; a booter that died leaves the boot to the
    loop itself."""
    import multiprocessing

    monkeypatch.setattr(host, "require", lambda: None)
    code, got = collect_nested(tmp_path, monkeypatch, MULTI_KERNEL)
    scheduler = got.scheduler
    groups = list(scheduler.groups.values())
    exited = VMResult("exited", 0, "6.12", "tcg", 50.0, 30.0)
    monkeypatch.setattr(runner, "run", lambda command, spec, on_output=None: exited)
    said = []
    monkeypatch.setattr(scheduler, "_write_line", said.append)  # the booter's lines come through the queue
    context = multiprocessing.get_context("fork")
    scheduler._from_booter, scheduler._background = context.Queue(), groups
    scheduler._booter = context.Process(target=scheduler._boot_in_order, daemon=True)
    scheduler._booter.start()
    for group in groups:
        scheduler._await(group)
        assert group.vm == exited and group.failure is None and os.path.isdir(group.shared)  # the file stays
        scheduler._read_results(group)
        assert group.shared is None
    scheduler._booter.join(30)
    assert scheduler._booter.exitcode == 0
    assert sum("ebpfkit vm: booting" in line for line in said) == len(groups), said

    for group in groups:
        group.vm = group.results = None
    scheduler._background = groups
    scheduler._booter = context.Process(target=os._exit, args=(9,), daemon=True)  # dies at once
    scheduler._booter.start()
    scheduler._await(groups[0])
    assert groups[0].vm == exited
    assert any("the background booter ended (exit 9)" in line for line in said), said
    shutil.rmtree(groups[0].shared)


def test_the_cached_view_binds_each_outermost_directory_once():
    """The Python's prefix, its venv inside the project and the project: one bind for the
    project (the venv is under it), one for the prefix; never "/", never an unsafe path."""
    lines = "\n".join(runner._cached_view_lines(["/opt/py", "/work/p/.venv", "/work/p", "/", "/bad path"]))
    assert f"cache=loose,msize=524288 {runner.CACHED_VIEW_TAG} {runner.CACHED_VIEW_MOUNT}" in lines
    assert "for d in /opt/py /work/p; do" in lines
    assert runner._cached_view_lines(["/"]) == []

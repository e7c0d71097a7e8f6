"""The VM harness seen from the host: a nested pytest session whose vm tests pass, fail,
skip and panic inside one boot, reported in the host's session as if local; the CLI's
exit status, a hung guest killed at the timeout, and missing packages named."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

from ebpfkit.vm import find_kernels

NESTED = textwrap.dedent('''
    import os

    import pytest

    KERNELS = {kernels!r}  # the default kernel (shares the group's boot) and another

    pytestmark = pytest.mark.vm

    def test_passes():
        with open("/proc/cmdline") as f:
            assert "ebpfkit.vm=1" in f.read().split()

    def test_fails():
        assert 1 + 1 == 3, "arithmetic is broken in the guest"

    def test_skips():
        pytest.skip("skipped inside the guest")

    @pytest.mark.vm(kernel=KERNELS)
    def test_each_kernel(ebpfkit_vm_kernel):
        assert os.uname().release == ebpfkit_vm_kernel

    @pytest.mark.vm(kernel="0.0.1-not-installed")
    def test_on_a_kernel_not_installed():
        pass

    def test_y_panics():
        with open("/proc/sysrq-trigger", "w") as f:
            f.write("c")

    def test_z_after_the_panic():
        pass
''')


def nested_pytest(tmp_path, source: str, *args, env=None, timeout=300):
    """Run pytest on ``source`` in a fresh directory; (process, {test name: (outcome, text)})."""
    (tmp_path / "test_nested.py").write_text(source)
    xml = tmp_path / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "test_nested.py", "-p", "no:cacheprovider",
                           f"--junitxml={xml}", "-rA", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=env)
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
                text = (child.get("message") or "") + "\n" + (child.text or "")
                break
        outcomes[case.get("name")] = (outcome, text)
    return proc, outcomes


def other_kernel(default) -> str:
    """An installed kernel with modules besides the default (setup.sh --test installs 6.1 and 6.12)."""
    other = next((k.release for k in find_kernels() if k.modules and k.release != default.release), None)
    assert other, "one kernel installed: apt-get install linux-image-amd64 linux-image-6.12-amd64"
    return other


def test_vm_tests_report_pass_fail_skip_and_panic_as_if_local(vm_kernel, tmp_path):
    started = time.monotonic()
    other = other_kernel(vm_kernel)
    proc, got = nested_pytest(tmp_path, NESTED.replace("{kernels!r}", repr([vm_kernel.release, other])))
    print(f"nested session (two boots) took {time.monotonic() - started:.1f} s")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    # one boot per kernel: the default's for the whole group and one variant, the other's for its variant
    assert f"ebpfkit vm: booting {vm_kernel.release} for 6 test(s)" in proc.stdout, proc.stdout
    assert f"ebpfkit vm: booting {other} for 1 test(s)" in proc.stdout, proc.stdout
    assert proc.stdout.count("ebpfkit vm: booting") == 2
    for release in (vm_kernel.release, other):  # each variant ran, and passed, in its own kernel
        assert got[f"test_each_kernel[{release}]"] == ("passed", ""), output

    assert got["test_passes"] == ("passed", ""), output
    outcome, text = got["test_fails"]
    assert outcome == "failure"
    assert "arithmetic is broken in the guest" in text and "assert (1 + 1) == 3" in text, text
    outcome, text = got["test_skips"]
    assert outcome == "skipped" and "skipped inside the guest" in text, text
    outcome, text = got["test_on_a_kernel_not_installed"]
    assert outcome == "error" and "0.0.1-not-installed" in text and "linux-image-amd64" in text, text
    outcome, text = got["test_y_panics"]
    assert outcome == "failure", text
    assert "while this test ran" in text and "panicked" in text and "sysrq triggered crash" in text, text
    outcome, text = got["test_z_after_the_panic"]
    assert outcome == "error" and "before this test ran" in text, text  # never set up


def _without_qemu() -> dict:
    # only the interpreter's directory (vng, virtme-run): no qemu-system-x86_64, no busybox
    return dict(os.environ, PATH=os.path.dirname(sys.executable))


def test_missing_qemu_fails_the_vm_tests_naming_the_package(host_only, tmp_path):
    source = "import pytest\n\n@pytest.mark.vm\ndef test_inside():\n    pass\n"
    proc, got = nested_pytest(tmp_path, source, env=_without_qemu(), timeout=60)
    outcome, text = got["test_inside"]
    assert outcome == "error", proc.stdout
    assert "qemu-system-x86_64 is not installed" in text and "apt-get install qemu-system-x86" in text, text


def test_missing_qemu_skips_with_the_reason_when_asked(host_only, tmp_path):
    source = "import pytest\n\n@pytest.mark.vm\ndef test_inside():\n    pass\n"
    proc, got = nested_pytest(tmp_path, source, "--vm-missing=skip", env=_without_qemu(), timeout=60)
    assert proc.returncode == 0, proc.stdout
    outcome, text = got["test_inside"]
    assert outcome == "skipped" and "apt-get install qemu-system-x86" in text, text


def ebpfkit(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ebpfkit", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_runs_the_command_as_root_in_the_guest_and_returns_its_status(vm_kernel):
    proc = ebpfkit("vm", "run", "--lsm", "--", "sh", "-c",
                   "uname -r; id -u; cat /sys/kernel/security/lsm; echo; echo oops >&2; exit 7")
    assert proc.returncode == 7, proc.stderr
    release, uid, lsms = proc.stdout.split()[:3]
    assert release == vm_kernel.release
    assert uid == "0"
    assert "bpf" in lsms.split(",")
    assert "oops" in proc.stderr


def test_cli_kills_a_hung_guest_at_the_timeout(vm_kernel):
    started = time.monotonic()
    proc = ebpfkit("vm", "run", "--timeout", "45", "--", "sh", "-c", "echo started; sleep 600")
    elapsed = time.monotonic() - started
    assert proc.returncode == 124, proc.stderr
    assert "timed out" in proc.stderr and "killed after 45 s" in proc.stderr, proc.stderr
    # normally the command hangs (boot-to-command ~20 s); on a crowded machine the boot
    # itself may outlast the timeout: either way the whole VM must be gone in time
    assert "the command had run for" in proc.stderr or "had not started yet" in proc.stderr, proc.stderr
    if "started" in proc.stdout:
        assert "the command had run for" in proc.stderr, proc.stderr
    assert elapsed < 45 + 20


def test_a_guest_whose_user_space_stops_is_sent_an_nmi_and_reported_frozen(vm_kernel):
    """A guest whose heartbeat stops (here: the test stops the loop that beats, as a frozen
    guest would) is sent an NMI, panics printing its stacks, and is reported frozen well before
    the timeout."""
    from ebpfkit.vm.runner import HEARTBEAT_NAME, VMSpec, run

    started = time.monotonic()
    output = bytearray()
    # "[e]": the pattern must not match this shell's own command line
    result = run(["sh", "-c", f"pkill -STOP -f '[{HEARTBEAT_NAME[0]}]{HEARTBEAT_NAME[1:]}' && echo stopped; sleep 600"],
                 VMSpec(vm_kernel, timeout=400, freeze_after=20),
                 on_output=lambda stream, data: output.extend(data))
    elapsed = time.monotonic() - started
    assert b"stopped" in output, result.describe()
    assert result.status == "frozen" and result.exit_code is None, result.describe()
    assert 20 <= result.silent_for < 40 and elapsed < 200, (result.silent_for, elapsed)
    text = result.describe()
    assert "froze: its user space did nothing for" in text and "made it panic" in text, text
    assert "NMI" in text and "Kernel panic - not syncing" in text, text


def test_kvm_probe_waits_for_the_kernel_to_speak(vm_kernel, tmp_path):
    """The probe behind choose_accel(): a kernel that reaches its first console line passes
    (shown under TCG, which always runs); silence fails it, as from a KVM that stalls the
    kernel (or an image that is no kernel)."""
    from ebpfkit.vm import host

    tcg = [host.find_qemu(), "-accel", "tcg", "-nodefaults", "-no-user-config", "-display", "none"]
    assert host._kernel_boots(tcg, vm_kernel.image)
    junk = tmp_path / "not-a-kernel"
    junk.write_bytes(b"\0" * 4096)
    assert not host._kernel_boots(tcg, str(junk), seconds=3)

"""pytest plugin: run tests marked ``@pytest.mark.vm(...)`` inside a VM kernel.

    @pytest.mark.vm(lsm=True)                   # BPF-LSM active in the guest
    @pytest.mark.vm(kernel="6.1", memory="2G")  # an installed release/prefix, or an image path
    def test_lsm_hook(): ...

    @pytest.mark.vm(kernel=["6.1", "6.12"])     # one variant per kernel: test_x[6.1], test_x[6.12]
    def test_x(): ...

A list of kernels parametrizes the test (``pytest_generate_tests``, the parameter
``ebpfkit_vm_kernel``, a fixture the test may take to learn which it is), so each kernel's
result is its own, and the guest, given the variant's node id, collects the same variant.

On the host, the marked tests that were selected are grouped by (kernel, lsm, memory) (a test
that does not say ``lsm`` joins its kernel's BPF-LSM boot if there is one); each group boots
once (``ebpfkit.vm.run``), in the background while the host's tests run (those marked
``vm_quiet`` first, before any boot), and runs ``python -m pytest <its node ids>`` inside,
as root, over a read-only view of the host. The guest's reports come back through a file
on a shared directory (see ``results``) and are replayed in the host's session: pass, fail
(with the assertion text), skip, captured output and durations as if they ran locally.
A test still running when the guest timed out fails with the console's tail; after a panic the
unfinished tests get one more boot (the oops printed), and a second panic fails the test it hit.
A guest CPU stuck in the kernel (a soft lockup) is a panic too (``softlockup_panic=1``).

Inside the VM (``ebpfkit vm run -- pytest ...`` works too) marked tests simply run;
one needing ``lsm=True`` is skipped where BPF-LSM is not active, one wanting another kernel
(a variant of ``kernel=[...]`` included) is skipped naming both.

When the VM cannot run here (no QEMU, virtme-ng, busybox or kernel), the marked tests
FAIL, naming the package to install (scripts/setup.sh --test installs them all): CI must
not pass by skipping them. ``--vm-missing=skip`` turns that into skips, for machines that
cannot have them.

Registered through the ``pytest11`` entry point "ebpfkit", so any project that installs
ebpfkit can use the marker.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

MARK = "vm"
MARKER_HELP = ("vm(kernel=None, lsm=None, memory='2G', timeout=None): run the test inside a VM kernel "
               "booted by ebpfkit (one boot per distinct kernel/lsm/memory; lsm=None joins its kernel's "
               "BPF-LSM boot if there is one); kernel=[...] runs it once per kernel")
QUIET = "vm_quiet"
QUIET_HELP = (f"{QUIET}: a host test that measures scheduling, rates or latencies: it runs before the VMs "
              "start booting in the background (--vm-serial: where it is)")
KERNEL_PARAM = "ebpfkit_vm_kernel"
DEFAULT_TIMEOUT = 600.0
# a guest test running this long has every thread's stack printed (even one stuck in C), so a
# hang that ends in the VM's timeout says where it was
GUEST_STACK_DUMP_AFTER = 240.0
REPORT_OPTION = "--ebpfkit-vm-report"


def pytest_addoption(parser):
    group = parser.getgroup("ebpfkit-vm", "ebpfkit: tests inside a VM kernel (@pytest.mark.vm)")
    group.addoption("--vm-kernel", metavar="PATH|VERSION", default=None,
                    help="Kernel for vm tests whose marker names none (default: the newest installed).")
    group.addoption("--vm-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                    help=f"Kill a VM (boot and all its tests) after S seconds (default {DEFAULT_TIMEOUT:g}).")
    group.addoption("--vm-accel", choices=("auto", "kvm", "tcg"), default="auto",
                    help="KVM or software emulation (default: KVM when it works).")
    group.addoption("--vm-missing", choices=("fail", "skip"), default="fail",
                    help="When no VM can run here (missing package): fail the vm tests (default) or skip them.")
    group.addoption("--vm-serial", action="store_true", default=False,
                    help="Boot each VM when its first test comes up, not in the background while the "
                         "host's tests run.")
    group.addoption(REPORT_OPTION, dest="ebpfkit_vm_report", metavar="FILE", default=None,
                    help="(internal) write the session's reports as JSON lines to FILE.")


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_HELP)
    config.addinivalue_line("markers", QUIET_HELP)
    from .runner import in_vm

    if config.getoption("ebpfkit_vm_report"):
        from .results import GuestReporter

        config.pluginmanager.register(GuestReporter(config, config.getoption("ebpfkit_vm_report")),
                                      "ebpfkit-vm-reporter")
    if not in_vm():
        config.pluginmanager.register(VMScheduler(config), "ebpfkit-vm-scheduler")


@pytest.fixture(autouse=True)
def ebpfkit_vm_kernel(request):
    """The kernel a ``vm(kernel=[...])`` variant asks for ("6.12"); None in any other test.
    Autouse so that every test has the name ``pytest_generate_tests`` parametrizes."""
    return getattr(request, "param", None)


def pytest_generate_tests(metafunc):
    """``@pytest.mark.vm(kernel=[...])``: one variant per kernel, its id naming the kernel."""
    kernels = _kernel_list(metafunc.definition.get_closest_marker(MARK), metafunc.definition.nodeid)
    if kernels is not None:
        metafunc.parametrize(KERNEL_PARAM, kernels, ids=kernels)


def _kernel_list(marker, where: str) -> list[str] | None:
    """The marker's list of kernels (unique, in order), or None when it names one or none."""
    wanted = marker.kwargs.get("kernel") if marker is not None else None
    if not isinstance(wanted, (list, tuple)):
        return None
    if not wanted or not all(isinstance(k, str) and k for k in wanted):
        # 6.10 as a number would be 6.1: only strings say what was meant
        pytest.fail(f"{where}: @pytest.mark.vm(kernel=[...]) needs a non-empty list of strings "
                    f"(kernel=[\"6.1\", \"6.12\"]), got {wanted!r}", pytrace=False)
    return list(dict.fromkeys(wanted))


def wanted_kernel(item) -> str | None:
    """The kernel a marked test asks for: its variant's under ``kernel=[...]``, else the marker's."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and KERNEL_PARAM in callspec.params:
        return callspec.params[KERNEL_PARAM]
    wanted = item.get_closest_marker(MARK).kwargs.get("kernel")
    return wanted if isinstance(wanted, str) else None


def pytest_runtest_setup(item):
    """Inside a VM: fail a test marked lsm=True where BPF-LSM is not active (the guest cannot
    show what the test must: a skip would hide the only enforcement coverage); skip one that
    wants another kernel than this guest's."""
    marker = item.get_closest_marker(MARK)
    if marker is None:
        return
    from .runner import in_vm

    if not in_vm():
        return
    from .results import active_lsms

    lsms = active_lsms()
    if marker.kwargs.get("lsm") and lsms is not None and "bpf" not in lsms.split(","):
        pytest.fail(f"needs BPF-LSM, not active in this VM ({lsms}): boot with `ebpfkit vm run --lsm`",
                    pytrace=False)
    wanted = wanted_kernel(item)
    if wanted and not _kernel_matches(wanted, os.uname().release):
        pytest.skip(f"wants kernel {wanted}, this VM runs {os.uname().release}")


def _kernel_matches(wanted: str, release: str) -> bool:
    from .kernels import image_release

    if os.sep in wanted:
        return image_release(wanted) in (None, release)
    return release == wanted or (release.startswith(wanted) and release[len(wanted):][:1] in ".-")


class _Group:
    """One boot: the marked tests sharing a kernel and options, and what came back."""

    def __init__(self, key, kernel, error, lsm: bool, memory: str):
        self.key, self.kernel, self.error, self.lsm, self.memory = key, kernel, error, lsm, memory
        self.items: list = []
        self.results = None      # GuestResults
        self.vm = None           # VMResult
        self.failure: str | None = None  # the VM could not run at all
        self.output = bytearray()  # the guest pytest's output (tail)
        self.shared: str | None = None  # the directory of its results file, until they are read


class VMScheduler:
    """Host side: boots a VM per group on its first test, then reports each test in place."""

    def __init__(self, config):
        self.config = config
        self.groups: dict = {}
        self._item_group: dict = {}
        self._item_key: dict = {}
        self._booter = None         # the process booting the groups while the host's tests run
        self._from_booter = None    # its messages: ("say", text) and ("booted", index, state)
        self._background: list = []  # the groups it boots, in order
        self._to_parent = None      # in the booter: where _say sends its lines
        self._booter_started = False

    def _options(self, item):
        kw = item.get_closest_marker(MARK).kwargs
        return (wanted_kernel(item) or self.config.getoption("vm_kernel"), kw.get("lsm"),
                str(kw.get("memory", "2G")))

    def _key_of(self, item):
        """(image, lsm, memory) and the kernel; ``lsm`` is None where the test does not say."""
        from ..errors import EbpfkitError
        from .kernels import resolve

        if item.nodeid not in self._item_key:
            spec, lsm, memory = self._options(item)
            try:
                kernel = resolve(spec)
                self._item_key[item.nodeid] = (kernel.image, lsm, memory), kernel, None
            except EbpfkitError as exc:
                self._item_key[item.nodeid] = (f"error:{spec}", lsm, memory), None, exc
        return self._item_key[item.nodeid]

    def _group_of(self, item, lsm_keys: frozenset = frozenset()) -> _Group:
        """A test that does not say ``lsm`` boots with BPF-LSM when tests of its kernel need it
        anyway (one boot fewer: BPF-LSM changes nothing for a test that does not use it), and
        without it otherwise; ``lsm=False`` keeps a test out of BPF-LSM boots."""
        if item.nodeid in self._item_group:
            return self._item_group[item.nodeid]
        (image, lsm, memory), kernel, error = self._key_of(item)
        lsm = bool(lsm) if lsm is not None else (image, True, memory) in lsm_keys
        key = (image, lsm, memory)
        if key not in self.groups:
            self.groups[key] = _Group(key, kernel, error, lsm, memory)
        group = self._item_group[item.nodeid] = self.groups[key]
        return group

    def _group_timeout(self, group: _Group) -> float:
        marked = [i.get_closest_marker(MARK).kwargs.get("timeout") for i in group.items]
        return max([float(t) for t in marked if t] + [self.config.getoption("vm_timeout")])

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        marked = [i for i in items if i.get_closest_marker(MARK)]
        lsm_keys = frozenset(key for key in (self._key_of(i)[0] for i in marked) if key[1])
        for item in marked:
            self._group_of(item, lsm_keys).items.append(item)
        # pytest-timeout would time the first test of a group with the whole boot inside
        # (and a test's own timeout marker is meant for the guest): on the host, let the
        # VM's timeout act first, which also says what was running
        if config.pluginmanager.hasplugin("timeout"):
            for item in marked:
                item.add_marker(pytest.mark.timeout(self._group_timeout(self._group_of(item)) + 120),
                                append=False)
        if marked and self._in_background(config):  # the quiet host tests first, before any boot
            items[:] = sorted(items, key=lambda i: not _quiet(i))  # stable: each part keeps its order

    def _in_background(self, config) -> bool:
        return not (config.option.collectonly or config.getoption("vm_serial") or
                    config.getoption("capture") == "no")  # -s: the guest's output live, not amid the host's

    def _start_booter(self, session) -> None:
        """Boot the groups one after another, in the order of their first tests, in a process
        forked now (at the first host test not marked vm_quiet), while the host's tests run;
        each VM test then waits for its group. A guest under emulation keeps about one core
        busy, the host's tests another. Forked between two tests, so what a host test sets in
        the environment (monkeypatch) never reaches a guest."""
        import multiprocessing

        self._booter_started = True
        groups = list(dict.fromkeys(self._group_of(i) for i in session.items if i.get_closest_marker(MARK)))
        if not groups:
            return
        for group in groups:
            self._select(group, session)
        context = multiprocessing.get_context("fork")
        self._from_booter = context.Queue()
        self._background = groups
        self._booter = context.Process(target=self._boot_in_order, name="ebpfkit-vm-booter", daemon=True)
        self._booter.start()

    def _boot_in_order(self) -> None:
        """The booter process: each group's boot(s); the results file stays for the parent."""
        self._to_parent = self._from_booter
        for index, group in enumerate(self._background):
            self._boot(group)
            self._to_parent.put(("booted", index, (group.vm, group.failure, group.shared, bytes(group.output))))

    def _await(self, group: _Group) -> None:
        """Wait for the booter's word on ``group``; boot it here if the booter is gone."""
        import queue

        while group.vm is None and group.failure is None:
            try:
                self._take(self._from_booter.get(timeout=1.0))
            except queue.Empty:
                if not self._booter.is_alive() and self._from_booter.empty():
                    self._say(f"ebpfkit vm: the background booter ended (exit {self._booter.exitcode}) "
                              "before this group's boot: booting it here")
                    self._boot(group)

    def _take(self, message) -> None:
        if message[0] == "say":
            self._say(message[1])
        else:
            _, index, (vm, failure, shared, output) = message
            group = self._background[index]
            group.vm, group.failure, group.shared = vm, failure, shared
            group.output[:] = output

    def _drain(self) -> None:
        import queue

        while self._from_booter is not None:
            try:
                self._take(self._from_booter.get_nowait())
            except queue.Empty:
                return

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self._booter is not None and self._booter.is_alive():
            self._booter.terminate()  # SIGTERM: its running VM is killed on the way out
            self._booter.join(60)
        self._drain()
        for group in self.groups.values():
            if group.shared:
                shutil.rmtree(group.shared, ignore_errors=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._drain()
        if not self._booter_started and not _quiet(item) and self._in_background(self.config):
            self._start_booter(item.session)
        if item.get_closest_marker(MARK) is None:
            return None
        group = self._group_of(item)
        if group.results is None and group.failure is None:
            if group in self._background:
                self._await(group)
            else:
                self._select(group, item.session, item)
                self._boot(group)
            self._read_results(group)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in self._reports(group, item):
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    # --- one boot ---

    def _select(self, group: _Group, session, item=None) -> None:
        """Keep the group's selected tests (collection hooks after ours may deselect)."""
        selected = set(map(id, session.items))
        group.items = [i for i in group.items if id(i) in selected] or [item]

    def _boot(self, group: _Group) -> None:
        """Boot the group's kernel for its tests (again after a crash mid-run): group.vm, and
        group.shared holding the results file; or group.failure where no VM can run."""
        from ..errors import EbpfkitError
        from ..output import forward_output
        from . import host
        from .runner import VMSpec, run, shared_tmp

        if group.error is not None:
            group.failure = _unavailable(group.error)
            return
        try:
            host.require()
        except EbpfkitError as exc:
            group.failure = _unavailable(exc)
            return
        group.shared = tempfile.mkdtemp(prefix="ebpfkit-vmtests-", dir=shared_tmp())
        results_file = os.path.join(group.shared, "results.jsonl")
        spec = VMSpec(group.kernel, lsm=group.lsm, memory=group.memory, timeout=self._group_timeout(group),
                      accel=self.config.getoption("vm_accel"), cwd=str(self.config.rootpath),
                      rwdirs=(group.shared,), env=self._passed_env())
        self._say(f"ebpfkit vm: booting {group.kernel.release}{' with BPF-LSM' if group.lsm else ''} "
                  f"for {len(group.items)} test(s)")
        live = self.config.getoption("capture") == "no"

        def on_output(stream, data):
            group.output.extend(data)
            del group.output[:-65536]
            if live:  # -s: the guest's pytest output, as it comes
                forward_output("stdout", data)

        try:
            group.vm = run(self._guest_command(group, results_file), spec, on_output=on_output)
            if group.vm.boots > 1:
                self._say(f"ebpfkit vm: {group.kernel.release} failed before the tests started "
                          f"({group.vm.accel}); booted it once more")
            if group.vm.status in ("panic", "frozen") and group.vm.boot_seconds is not None:  # mid-run
                self._after_a_crash(group, spec, results_file, on_output)  # (run() boots twice if not)
        except EbpfkitError as exc:
            group.failure = _unavailable(exc)
        except BaseException:  # stopped (the booter's SIGTERM): nobody will read the results
            shutil.rmtree(group.shared, ignore_errors=True)
            raise

    def _read_results(self, group: _Group) -> None:
        from .results import GuestResults

        if group.failure is not None:
            return
        try:
            group.results = GuestResults(self.config, os.path.join(group.shared, "results.jsonl"))
        finally:
            shutil.rmtree(group.shared, ignore_errors=True)
            group.shared = None
        vm = group.vm
        boot = f"{vm.boot_seconds:.1f} s" if vm.boot_seconds is not None else "never"
        self._say(f"ebpfkit vm: {vm.kernel} ({vm.accel}): boot-to-command {boot}, "
                  f"{len(group.results.reports)} of {len(group.items)} test(s) reported, "
                  f"{vm.seconds:.1f} s in all, {vm.status}")

    def _after_a_crash(self, group: _Group, spec, results_file: str, on_output) -> None:
        """A guest that panicked or froze mid-run (under TCG a 6.12 guest panicked, once in a
        while, "in interrupt", and a 6.1 guest froze without a word, in tests that pass on
        their next boot) boots once more for the tests that had not finished; the console is
        printed whole either way, and a second crash is reported as it is, as a failure of the
        test it interrupted."""
        from .results import GuestResults
        from .runner import run

        first = group.vm
        done = GuestResults(self.config, results_file)
        unfinished = [i for i in group.items if not done.complete(i.nodeid)]
        running = done.started[-1] if done.started else None
        what = "panicked" if first.status == "panic" else f"froze (no heartbeat for {first.silent_for:.0f} s)"
        self._say(f"ebpfkit vm: WARNING: {first.kernel} {what} ({first.accel}); the last test "
                  f"started: {running or 'none'}; {len(group.items) - len(unfinished)} of "
                  f"{len(group.items)} test(s); booting it once more for the {len(unfinished)} "
                  f"unfinished\n--- guest console ---\n{first.console_tail(120)}")
        _keep_finished(results_file, {i.nodeid for i in group.items if done.complete(i.nodeid)})
        group.vm = run(self._guest_command(group, results_file, unfinished), spec, on_output=on_output)

    def _guest_command(self, group: _Group, results_file: str, items=None) -> list[str]:
        config = self.config
        argv = [sys.executable, "-m", "pytest", *[i.nodeid for i in (items or group.items)],
                "--rootdir", str(config.rootpath), "-p", "no:cacheprovider", "-q",
                "-o", f"faulthandler_timeout={GUEST_STACK_DUMP_AFTER:g}", REPORT_OPTION, results_file]
        if config.inipath:
            argv += ["-c", str(config.inipath)]
        name = config.pluginmanager.get_name(sys.modules[__name__])
        if name != "ebpfkit":  # loaded with -p, not through the entry point: the guest needs it too
            argv += ["-p", __name__]
        if config.getoption("capture") == "no":
            argv.append("-s")
        if not any(_uses_hypothesis(i) for i in group.items):
            # importing it is most of pytest's start-up, and under emulation that is ~10 s
            argv += ["-p", "no:hypothesispytest"]
        return argv

    @staticmethod
    def _passed_env() -> dict:
        return {k: os.environ[k] for k in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD",) if k in os.environ}

    def _say(self, text: str) -> None:
        if self._to_parent is not None:  # the booter: the parent writes it between two tests
            self._to_parent.put(("say", text))
        else:
            self._write_line(text)

    def _write_line(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.config.getoption("verbose") > -2:
            reporter.write_line(text)

    # --- reports for one test ---

    def _reports(self, group: _Group, item) -> list:
        from .results import synthetic_reports

        if group.failure is not None:
            outcome = "skipped" if self.config.getoption("vm_missing") == "skip" else "failed"
            return synthetic_reports(item, outcome, group.failure)
        results, vm = group.results, group.vm
        got = results.reports.get(item.nodeid, [])
        if results.complete(item.nodeid):
            return got
        if vm.status != "exited":
            running = results.started and results.started[-1] == item.nodeid
            where = "while this test ran" if running else "before this test ran"
            text = f"{where}: {vm.describe()}"
            if running:  # where it hung: the stacks faulthandler printed (GUEST_STACK_DUMP_AFTER)
                text += _output_tail(group, 80)
            return synthetic_reports(item, "failed", text, before=got)
        text = f"the VM's pytest did not report this test (exit status {vm.exit_code})"
        if results.collect_errors:
            text += "\n--- collection errors in the guest ---\n" + "\n".join(results.collect_errors)
        return synthetic_reports(item, "failed", text + _output_tail(group, 30), before=got)


def _output_tail(group: _Group, lines: int) -> str:
    tail = group.output.decode(errors="replace").strip().splitlines()[-lines:]
    return "\n--- guest pytest output (last lines) ---\n" + "\n".join(tail) if tail else ""


def _keep_finished(results_file: str, finished: set) -> None:
    """Drop the records of unfinished tests from a results file (a new boot runs them again
    and appends its own)."""
    import json

    try:
        with open(results_file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return  # the guest wrote none: nothing finished
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        nodeid = record.get("nodeid") or record.get("data", {}).get("nodeid")
        if record.get("event") in ("session", "collect") or nodeid in finished:
            kept.append(line)
    with open(results_file, "w", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in kept))


def _quiet(item) -> bool:
    """A host test marked vm_quiet (a VM test is never run beside a boot of its own)."""
    return bool(item.get_closest_marker(QUIET)) and not item.get_closest_marker(MARK)


def _uses_hypothesis(item) -> bool:
    return "hypothesis" in item.keywords or getattr(getattr(item, "obj", None), "is_hypothesis_test", False)


def _unavailable(exc) -> str:
    hint = getattr(exc, "hint", None)
    return f"cannot run a VM here: {exc}" + (f" ({hint})" if hint else "")

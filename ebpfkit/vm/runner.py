"""Boot a kernel with virtme-ng, run one command inside as root, stream its output back.

The guest sees the host's root filesystem read-only (9p) with writable overlays (/tmp, /var,
...). A per-run host directory is shared read-write: it holds the guest-side script and
receives the command's exit status, a "started" stamp (boot-to-command time) and the guest
kernel's console (a virtio console, hvc0), which is how panics are recognised.

The whole process tree (vng -> virtme-run -> qemu) runs in a session of its own, killed as a
group on a timeout, an error, Ctrl-C, SIGTERM or SIGHUP: no QEMU outlives a run (only a
SIGKILL of this process could orphan it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from . import host
from .kernels import Kernel

log = logging.getLogger("ebpfkit.vm")

GUEST_MARK = "ebpfkit.vm=1"          # on the guest's kernel command line
IN_VM_ENV = "EBPFKIT_IN_VM"          # in the command's environment
KERNEL_ENV = "EBPFKIT_VM_KERNEL"     # there too: the release the host meant to boot
HOST_CACHE_MOUNT = "/run/ebpfkit-vm/host-cache"
CACHED_VIEW_TAG, CACHED_VIEW_MOUNT = "ebpfkit.hostroot", "/run/ebpfkit-vm/hostroot"
KERNEL_BTF = "/sys/kernel/btf/vmlinux"
PANIC_RE = re.compile(r"Kernel panic - not syncing|BUG: kernel NULL pointer|general protection fault")
# where the report of a crash begins (the panic line itself comes after the oops and its trace)
OOPS_RE = re.compile(r"BUG: |Oops: |general protection fault|kernel BUG at|Kernel panic - not syncing")
# Passed through to the guest command (virtme-ng's init starts it with a minimal environment).
PASS_ENV = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LANG", "LC_ALL", "TERM", "NO_COLOR", "TZ")
KILL_GRACE = 5.0
# The guest touches a file this often; a guest whose file stops changing for FREEZE_AFTER
# seconds has stopped running user space (under TCG a vCPU once stopped for good without a
# word on the console): it gets an NMI, which its kernel turns into a panic that prints every
# CPU's stack (unknown_nmi_panic, panic_all_cpu_backtrace), and the run ends there.
HEARTBEAT_EVERY, FREEZE_AFTER, NMI_WAIT = 5, 150.0, 30.0
HEARTBEAT_NAME = "ebpfkit-heartbeat"  # the loop's $0, so a test can stop it

_WARMUP = 'SEC("tp/syscalls/sys_enter_getpid") int ebpfkit_vm_warmup(void *ctx) { return 0; }\n' \
          'char LICENSE[] SEC("license") = "GPL";\n'


@dataclass
class VMSpec:
    kernel: Kernel
    lsm: bool = False
    memory: str = "2G"
    cpus: int | None = None
    timeout: float | None = None      # seconds from start to kill; None: no limit
    freeze_after: float = FREEZE_AFTER  # seconds without a heartbeat that make a guest frozen
    accel: str = "auto"               # auto | kvm | tcg
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None            # default: the caller's cwd (the same path exists inside)
    append: tuple[str, ...] = ()      # more kernel command-line options
    share_cache: bool = True          # let the guest reuse the host's ebpfkit compile cache
    rwdirs: tuple[str, ...] = ()      # host directories the guest may write (same path inside)
    scratch: str | None = None        # size of a fresh ext4 disk (virtio-blk) as the command's TMPDIR


@dataclass
class VMResult:
    status: str                       # exited | timeout | frozen | panic | died
    exit_code: int | None             # the command's, when it exited
    kernel: str
    accel: str
    seconds: float
    boot_seconds: float | None        # vng start -> command start (None: never started)
    console: str = ""                 # the guest kernel's console (warnings and worse)
    stderr_tail: str = ""             # the last of vng's/the command's stderr
    timeout: float | None = None
    silent_for: float | None = None   # frozen: seconds without a heartbeat before the NMI
    boots: int = 1                    # 2: the first never reached the command (see run())

    @property
    def ok(self) -> bool:
        return self.status == "exited"

    def console_tail(self, lines: int = 40) -> str:
        """The console's last lines, or from just before the first oops or panic message when
        there is one (what follows it is the stack trace worth reading)."""
        text = self.console.rstrip().splitlines()
        first = next((i for i, line in enumerate(text) if OOPS_RE.search(line)), None)
        if first is not None:
            return "\n".join(text[max(0, first - 2):first - 2 + lines])
        return "\n".join(text[-lines:])

    def describe(self) -> str:
        """One paragraph saying what went wrong (for non-"exited" results)."""
        if self.status == "exited":
            return f"the command exited with status {self.exit_code}"
        if self.status == "timeout":
            where = (f"the command had run for {self.seconds - self.boot_seconds:.0f} s" if self.boot_seconds
                     else "the command had not started yet (still booting)")
            text = f"the VM ({self.kernel}) timed out: killed after {self.timeout:g} s; {where}"
        elif self.status == "panic":
            text = f"the guest kernel {self.kernel} panicked"
        elif self.status == "frozen":
            text = (f"the guest ({self.kernel}) froze: its user space did nothing for {self.silent_for:.0f} s; "
                    f"an NMI then {'made it panic (the stacks below)' if PANIC_RE.search(self.console) else 'got no answer'}")
        else:
            text = f"the VM ({self.kernel}) ended without the command's exit status"
            if self.boot_seconds is None:
                text += " (it never started: boot failure?)"
        if self.console.strip():  # a frozen guest's: each CPU's stack
            text += f"\n--- guest console (last lines) ---\n{self.console_tail(120 if self.status == 'frozen' else 40)}"
        if self.status == "died" and self.stderr_tail.strip():
            last = "\n".join(self.stderr_tail.rstrip().splitlines()[-15:])
            text += f"\n--- stderr (last lines) ---\n{last}"
        return text


def in_vm() -> bool:
    """True inside a VM booted by ebpfkit (also when a user runs pytest there by hand)."""
    if os.environ.get(IN_VM_ENV) == "1":
        return True
    try:
        with open("/proc/cmdline") as f:
            return GUEST_MARK in f.read().split()
    except OSError:
        return False


def run(command: Sequence[str], spec: VMSpec,
        on_output: Callable[[str, bytes], None] | None = None) -> VMResult:
    """Boot ``spec.kernel``, run ``command`` (argv) inside as root, return how it ended.

    ``on_output(stream, data)`` receives the command's output as it comes ("stdout" or
    "stderr"). Raises NotSupportedError when a host piece is missing."""
    vng = host.require()
    accel, why = host.choose_accel(spec.accel, spec.kernel.image)
    log.info("booting %s with %s (%s)", spec.kernel.release, accel, why)
    result = _boot(vng, command, spec, accel, on_output)
    if result.status in ("died", "panic") and result.boot_seconds is None:
        # seen under nested KVM (an emulation failure while booting) and under TCG (an int3
        # oops in patched kernel text, ~3 s into boot), once in a while. The command never
        # started, so booting again is safe; a second failure is returned as it is
        log.warning("%s %s before the command started (%s); booting it once more",
                    spec.kernel.release, "died" if result.status == "died" else "panicked", accel)
        result = replace(_boot(vng, command, spec, accel, on_output), boots=2)
    return result


def _boot(vng: str, command: Sequence[str], spec: VMSpec, accel: str, on_output) -> VMResult:
    rundir = tempfile.mkdtemp(prefix="ebpfkit-vm-", dir=shared_tmp())
    watch = _OrphanWatch(rundir)
    try:
        env = _guest_env(spec, rundir)
        script = _write_script(rundir, command, env, spec)
        argv = _vng_argv(vng, spec, accel, rundir, script, env.get("EBPFKIT_CACHE_DIR"))
        log.debug("vng command: %s", shlex.join(argv))
        with _exit_on_termination():
            return _supervise(argv, spec, accel, rundir, on_output, watch.started)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
        watch.done()


# A process of its own that outlives us: told vng's process group, it waits for the end of its
# stdin, which comes when we end however we end; unless told "done" first (we cleaned up), it
# kills that group (QEMU is in it) and removes the run's directory (a scratch disk's image too).
_WATCHDOG = """import os, shutil, signal, sys
group = None
for line in sys.stdin:
    group = None if line.strip() == "done" else int(line)
if group is not None:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


class _OrphanWatch:
    """What a SIGKILL of this process would leave (QEMU and vng run in a session of their own,
    which no signal to us reaches), cleaned up by a watchdog that notices our end."""

    def __init__(self, rundir: str):
        read, self._write = os.pipe()
        try:
            subprocess.Popen([sys.executable, "-c", _WATCHDOG, rundir], stdin=read, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(read)

    def started(self, group: int) -> None:
        os.write(self._write, f"{group}\n".encode())

    def done(self) -> None:
        os.write(self._write, b"done\n")
        os.close(self._write)


@contextlib.contextmanager
def _exit_on_termination():
    """While a VM runs, SIGTERM/SIGHUP become SystemExit, so the VM is killed on the way out:
    QEMU is in a session of its own, and no signal sent to us reaches it by itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pid = os.getpid()

    def handler(signum, frame):
        if os.getpid() != pid:  # a child between fork and exec: die as the signal says
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        raise SystemExit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# --- building the run --------------------------------------------------------------------

_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")  # vng pastes paths into a shell command unquoted


def shared_tmp() -> str:
    """Where to make directories the guest shares (their paths go to vng unquoted)."""
    tmp = tempfile.gettempdir()
    return tmp if _SAFE_PATH.match(tmp) else "/tmp"


def _guest_env(spec: VMSpec, rundir: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env["PATH"] = host.tool_path()  # the venv's bin dir first, as on the host
    env.update({k: v for k, v in os.environ.items()
                if k.startswith("EBPFKIT_") and k not in ("EBPFKIT_BTF", "EBPFKIT_CACHE_DIR")})
    env[IN_VM_ENV] = "1"
    env[KERNEL_ENV] = spec.kernel.release
    if spec.share_cache:
        env.update(_share_engine_cache(rundir))
    env.update(spec.env)
    return env


def _share_engine_cache(rundir: str) -> dict[str, str]:
    """Environment that makes the guest's engine reuse the host's compile cache.

    The guest compiles against a copy of the host's BTF (EBPFKIT_COMPILE_BTF), so its
    type index, headers and objects are the ones already in the host's cache
    (mounted at the same path, writable through an overlay); CO-RE relocates against the
    guest kernel at load time. Clang under emulation is ~10x slower: this saves minutes.
    """
    try:
        from ..engine import cache
        cache_dir = str(cache.cache_dir())
    except OSError as exc:
        log.info("no ebpfkit cache to share with the guest: %s", exc)
        return {}
    if not _SAFE_PATH.match(cache_dir):
        log.info("not sharing the cache %s with the guest: unusual characters in its path", cache_dir)
        return {}
    env = {"EBPFKIT_CACHE_DIR": cache_dir}
    if os.path.exists(KERNEL_BTF):
        btf_copy = os.path.join(rundir, "host-vmlinux.btf")
        shutil.copyfile(KERNEL_BTF, btf_copy)
        env["EBPFKIT_COMPILE_BTF"] = btf_copy
        env.update(_warm_host_cache())
    return env


def _warm_host_cache() -> dict[str, str]:
    """Compile a trivial program on the host so the kernel type index exists
    before the guest needs them (a no-op once cached); name the clang it used, which spares
    the guest a search of every PATH directory."""
    try:
        from .. import engine
        from ..engine.compiler import CLANG_ENV, find_clang

        engine.compile(text=_WARMUP, name="vm_warmup.bpf.c").close()
        clang = find_clang()
        return {CLANG_ENV: clang.path} if clang and CLANG_ENV not in os.environ else {}
    except Exception as exc:  # best effort: the guest then compiles from scratch
        log.info("could not prepare the compile cache for the guest: %s", exc)
        return {}


def _write_script(rundir: str, command: Sequence[str], env: dict[str, str], spec: VMSpec) -> str:
    q = shlex.quote
    cwd = spec.cwd or os.getcwd()
    lines = ["# ebpfkit vm: the guest side of one run (as root, inside the VM)",
             f": > {q(rundir + '/started')}",
             f"sh -c 'while date +%s.%N > \"$1\"; do sleep {HEARTBEAT_EVERY}; done' {HEARTBEAT_NAME} "
             f"{q(rundir + '/heartbeat')} </dev/null >/dev/null 2>&1 &"]
    lines += _cached_view_lines([sys.base_prefix, sys.prefix, cwd])
    cache_dir = env.get("EBPFKIT_CACHE_DIR")
    if cache_dir:
        # the host's cache, read-only over 9p, made writable by a guest-only overlay at the
        # same path (the path is part of the precompiled header's key); else an empty cache
        up = "/run/ebpfkit-vm/cache"
        lines += [f"mkdir -p {q(cache_dir)} {up}/upper {up}/work 2>/dev/null",
                  f"mount -t overlay ebpfkit-cache -o lowerdir={HOST_CACHE_MOUNT},upperdir={up}/upper,"
                  f"workdir={up}/work {q(cache_dir)} 2>/dev/null || "
                  f"{{ export EBPFKIT_CACHE_DIR={up}/fresh; : > {q(rundir + '/cache-not-shared')}; }}"]
    lines += [f"export {k}={q(v)}" for k, v in env.items() if k != "EBPFKIT_CACHE_DIR"]
    if spec.scratch:
        lines += _scratch_lines(rundir)
    if cache_dir:
        lines.append(f"[ -n \"$EBPFKIT_CACHE_DIR\" ] || export EBPFKIT_CACHE_DIR={q(cache_dir)}")
    lines += [f"cd {q(cwd)} 2>/dev/null || cd /",
              shlex.join(command),
              "rc=$?",
              f"echo $rc > {q(rundir + '/exit')}",
              "exit $rc"]
    path = os.path.join(rundir, "guest.sh")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


SCRATCH_SERIAL = "ebpfkit-scratch"
SCRATCH_MOUNT = "/run/ebpfkit-vm/scratch"


def _make_scratch(rundir: str, size: str) -> str:
    """A sparse file of ``size`` with an empty ext4 on it, in the run's directory (removed with it)."""
    from ..errors import ConfigError, EbpfkitError

    if not re.fullmatch(r"[1-9][0-9]*[MG]", size):
        raise ConfigError("scratch", f"{size!r} is not a disk size such as 512M or 1G")
    path = os.path.join(rundir, "scratch.img")
    mkfs = shutil.which("mkfs.ext4") or "/sbin/mkfs.ext4"
    try:
        run = subprocess.run([mkfs, "-q", "-F", path, size], capture_output=True, text=True)
    except FileNotFoundError:
        raise EbpfkitError("the scratch disk needs mkfs.ext4", hint="install e2fsprogs") from None
    if run.returncode != 0:
        raise EbpfkitError(f"mkfs.ext4 of the {size} scratch disk failed: {run.stderr.strip()}")
    return path


def _scratch_lines(rundir: str) -> list[str]:
    """Guest commands that mount the scratch disk (the virtio-blk disk of that serial) and make
    it the command's TMPDIR: tests that need a real disk under their temporary directory (IO
    that raises the disk's own IRQs) get one; the guest's /tmp is an overlay on 9p."""
    q = shlex.quote
    return ["scratch=",
            f"for b in /sys/block/vd*; do [ \"$(cat $b/serial 2>/dev/null)\" = {SCRATCH_SERIAL} ] && "
            f"mkdir -p {SCRATCH_MOUNT} && mount /dev/${{b##*/}} {SCRATCH_MOUNT} && scratch=1; done",
            f"[ -n \"$scratch\" ] || {{ echo 'ebpfkit vm: the scratch disk could not be mounted' >&2; "
            f"echo 125 > {q(rundir + '/exit')}; exit 125; }}",
            f"export TMPDIR={SCRATCH_MOUNT}"]


def _cached_view_lines(dirs: Sequence[str]) -> list[str]:
    """Guest commands that bind a cached view of ``dirs`` (the Python, its venv, the working
    directory) over them. vng's root is 9p without a cache: every stat and open goes to
    the host, ~5 ms each under TCG, so starting a Python process that imports ebpfkit took
    ~20 s there, ~10 s with the metadata and data cached (``cache=loose``). The view is a
    snapshot as far as the guest knows: a file the host changes during the run may be seen
    as it was. A directory with a mount at, above or below it (vng's overlays, shared
    directories) keeps what vng gave it."""
    q = shlex.quote
    wanted = []
    for d in sorted({os.path.realpath(d) for d in dirs}):
        if d != "/" and _SAFE_PATH.match(d) and not any(d.startswith(w + "/") for w in wanted):
            wanted.append(d)
    if not wanted:
        return []
    view = CACHED_VIEW_MOUNT
    return [f"mkdir -p {view} && mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,cache=loose,msize=524288 "
            f"{CACHED_VIEW_TAG} {view} 2>/dev/null && for d in {' '.join(q(d) for d in wanted)}; do",
            "  awk -v d=\"$d\" '$2 != \"/\" && (index(d \"/\", $2 \"/\") == 1 || index($2, d \"/\") == 1) "
            "{ m = 1 } END { exit m }' /proc/mounts && [ -d \"$d\" ] && "
            f"mount --bind {view}\"$d\" \"$d\" 2>/dev/null",
            "done"]


def _vng_argv(vng: str, spec: VMSpec, accel: str, rundir: str, script: str, cache_dir: str | None) -> list[str]:
    console = os.path.join(rundir, "console.log")
    # A second console on a virtio port, into a file of our own: vng's serial console goes
    # to /dev/null (or, with -v, into the command's stderr), and panics must be recognisable.
    qemu_opts = (f"-device virtio-serial-pci,id=ebpfkitcon -chardev file,id=ebpfkitcon0,path={console} "
                 f"-device virtconsole,chardev=ebpfkitcon0,bus=ebpfkitcon.0")
    # a monitor of our own, to send a frozen guest an NMI
    qemu_opts += f" -chardev socket,id=ebpfkitmon,path={_monitor_path(rundir)},server=on,wait=off -mon chardev=ebpfkitmon"
    # the host's root a second time, read-only, for the cached view (_cached_view_lines)
    qemu_opts += (f" -fsdev local,id=ebpfkithost,path=/,security_model=none,readonly=on,multidevs=remap"
                  f" -device virtio-9p-pci,fsdev=ebpfkithost,mount_tag={CACHED_VIEW_TAG}")
    if spec.scratch:  # the scratch disk, found in the guest by its serial (_scratch_lines)
        image = _make_scratch(rundir, spec.scratch)
        qemu_opts += (f" -drive file={image},format=raw,if=none,id=ebpfkitscratch,cache=unsafe"
                      f" -device virtio-blk-pci,drive=ebpfkitscratch,serial={SCRATCH_SERIAL}")
    # softlockup_panic: under TCG a guest CPU once stopped answering IPIs, and the CPU patching a
    # tracepoint's static call waited for it for good; a panic ends such a run at the first
    # soft-lockup report, as a panic the caller knows (the test plugin boots again for the rest)
    # unknown_nmi_panic, panic_print=0x40: an NMI from the host (a frozen guest, _nmi_and_wait)
    # panics, printing every CPU's stack
    kopts = ["console=hvc0", "loglevel=5", "softlockup_panic=1", "unknown_nmi_panic=1", "panic_print=0x40",
             GUEST_MARK]
    if spec.lsm:
        kopts.append(f"lsm={spec.kernel.lsm_list()}")
    kopts += spec.append
    # "--opt=value": argparse would take a value starting with "-" for an option
    argv = [vng, f"--run={spec.kernel.image}", "--force-9p", f"--memory={spec.memory}",
            f"--rwdir={rundir}", f"--qemu-opts={qemu_opts}", f"--append={' '.join(kopts)}"]
    if cache_dir:
        argv.append(f"--rodir={HOST_CACHE_MOUNT}={cache_dir}")
    argv += [f"--rwdir={d}" for d in spec.rwdirs]
    if accel == "tcg":
        argv.append("--disable-kvm")
    if spec.cpus:
        argv.append(f"--cpus={spec.cpus}")
    if os.geteuid() != 0:
        argv.append("--user=root")
    return argv + [f"--exec=sh {script}"]


# --- running it --------------------------------------------------------------------------

def _supervise(argv, spec: VMSpec, accel: str, rundir: str, on_output, started_group=None) -> VMResult:
    env = dict(os.environ, PATH=host.tool_path(), TMPDIR=rundir)  # vng's temp files die with rundir
    started = time.monotonic()
    deadline = started + spec.timeout if spec.timeout else None
    boot_seconds = None
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    timed_out = False
    heartbeat = _Heartbeat(os.path.join(rundir, "heartbeat"), spec.freeze_after)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    if started_group:
        started_group(proc.pid)  # its own session: the group is its pid
    sel = selectors.DefaultSelector()
    try:
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, name)
        stamp = os.path.join(rundir, "started")
        while sel.get_map():
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
            wait = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))
            for key, _ in sel.select(wait):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                tail = tails[key.data]
                tail += data
                del tail[:-8192]
                if on_output:
                    on_output(key.data, data)
            if boot_seconds is None and os.path.exists(stamp):
                boot_seconds = time.monotonic() - started
            if heartbeat.stopped():
                log.warning("the guest (%s) has done nothing for %.0f s: sending it an NMI",
                            spec.kernel.release, heartbeat.silent_for)
                _nmi_and_wait(rundir)
                break
        if not timed_out and not heartbeat.frozen:
            try:
                proc.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        sel.close()
        _kill_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
    if boot_seconds is None and os.path.exists(os.path.join(rundir, "started")):
        boot_seconds = time.monotonic() - started
    seconds = time.monotonic() - started
    if os.path.exists(os.path.join(rundir, "cache-not-shared")):
        log.info("the guest could not mount the host's compile cache; it compiled from scratch")
    console = _read(os.path.join(rundir, "console.log"))
    exit_code = _read_exit(os.path.join(rundir, "exit"))
    if timed_out:
        status = "timeout"
    elif heartbeat.frozen:
        status = "frozen"
    elif exit_code is not None:
        status = "exited"
    elif PANIC_RE.search(console):
        status = "panic"
    else:
        status = "died"
    return VMResult(status=status, exit_code=exit_code if status == "exited" else None,
                    kernel=spec.kernel.release, accel=accel, seconds=seconds, boot_seconds=boot_seconds,
                    console=console, stderr_tail=tails["stderr"].decode(errors="replace"),
                    timeout=spec.timeout, silent_for=heartbeat.silent_for if heartbeat.frozen else None)


class _Heartbeat:
    """The guest's heartbeat file, seen from the host: it stopped when its content has not
    changed for ``limit`` seconds (counted from its first beat: a boot is not a freeze)."""

    def __init__(self, path: str, limit: float):
        self.path, self.limit = path, limit
        self.last, self.changed, self.frozen = None, None, False

    @property
    def silent_for(self) -> float:
        return 0.0 if self.changed is None else time.monotonic() - self.changed

    def stopped(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                beat = f.read()
        except OSError:
            beat = None
        if beat and beat != self.last:
            self.last, self.changed = beat, time.monotonic()
        self.frozen = self.changed is not None and self.silent_for >= self.limit
        return self.frozen


def _monitor_path(rundir: str) -> str:
    return os.path.join(rundir, "monitor.sock")


def _nmi_and_wait(rundir: str) -> None:
    """Send the guest an NMI through QEMU's monitor; wait until its console shows the panic
    that follows (unknown_nmi_panic) or NMI_WAIT passes."""
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mon:
            mon.settimeout(5)
            mon.connect(_monitor_path(rundir))
            mon.sendall(b"nmi\n")
            seen = b""
            while seen.count(b"(qemu)") < 2:  # the prompt before the command and the one after it
                data = mon.recv(4096)
                if not data:
                    break
                seen += data
    except OSError as exc:
        log.warning("could not send the guest an NMI: %s", exc)
        return
    end = time.monotonic() + NMI_WAIT
    console = os.path.join(rundir, "console.log")
    while time.monotonic() < end and not PANIC_RE.search(_read(console)):
        time.sleep(0.5)
    time.sleep(5)  # the other CPUs' stacks come after the panic line


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the run's whole process group (QEMU included); SIGKILL it if anything is
    still there after a grace period; return once the group is empty."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if _group_gone(proc, KILL_GRACE):
            break
    else:
        log.warning("processes of the VM run (process group %d) survived SIGKILL", proc.pid)
    try:
        proc.wait(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        log.warning("vng (pid %d) did not exit after SIGKILL", proc.pid)


def _group_gone(proc: subprocess.Popen, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while True:
        proc.poll()  # reap vng itself
        if not _live_members(proc.pid):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def _live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (an orphaned QEMU killed a moment
    ago stays a zombie until init reaps it: it is gone for our purpose)."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(name))
    return members


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _read_exit(path: str) -> int | None:
    text = _read(path).strip()
    return int(text) if text.isdigit() else None

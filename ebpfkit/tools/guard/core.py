"""Pins, maps and state of the guard.

Everything lives in /sys/fs/bpf/ebpfkit/guard/ (links and maps, so protection survives the
agent) and /run/ebpfkit/guard/ (state.json for display, guard.log for violations).

Keys are what the LSM hooks see: (inode->i_sb->s_dev, inode->i_ino) of the inode behind a
path. stat() does not always report that (overlayfs reports a layer's or a pseudo device,
btrfs a per-subvolume device), so a path is opened O_PATH and the kernel's own view is read
back: the inode number from /proc/self/fdinfo, the device of the superblock from the
mount's line in /proc/self/mountinfo. For a file on overlayfs the inodes of the layers
(upper and lower directories) are keyed too, so going round the overlay does not escape.

Who may change a running guard: only subjects it trusts (the policy's `trust:` entries and
processes they start with `inherit: true`, and its agent). Its maps, programs, links, pins,
policy file and state directory are protected from everyone else, so `guard stop` and
`guard reload` must run from a trusted context (see README).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import signal
import stat
import sys
import time

from ...errors import EbpfkitError, MapError
from ...engine import features
from ...engine.maps import KernelMap, Map
from ...engine.pinned import PinError, detach_pinned_link, pinned_link_prog_id, prog_exists
from ...engine.pinset import PinSet
from ...policy import OPERATIONS, GuardPolicy
from ...sysinfo.files import inode_of
from ...sysinfo.mounts import Mount, MountTable, unescape
from . import logfile

TOOL = "guard"
PINS = PinSet(TOOL)
PIN_DIR = PINS.path
STATE_DIR = os.environ.get("EBPFKIT_GUARD_STATE", "/run/ebpfkit/guard")
STATE_FILE = os.path.join(STATE_DIR, "state.json")
LOG_FILE = os.path.join(STATE_DIR, "guard.log")
LOCK_FILE = os.path.join(STATE_DIR, "lock")

# The maps' keys and values are typed through their BTF (struct guard_key: {"dev", "ino"}).
# The constants below are guard.h's #defines that resolving a policy needs (before any object
# is loaded); filter_bit() is checked against guard_filter_bit() run in the kernel.
TRUST_SELF, TRUST_INHERIT = 1, 2  # enum guard_trust
SELF_SHIFT = 16  # GUARD_SELF_SHIFT: self-only operations of an ancestor
MAP_NAMES = ("protected", "filter", "trusted", "protected_exe", "interpreters", "generation")  # what apply() fills
GEN_POLICY = 0  # enum guard_gen's GUARD_GEN_POLICY: bumped after each change of `protected`
# GUARD_FILTER_*: the bitmap the BPF side checks before each hash lookup
FILTER_BITS, FILTER_MULT = 20, 0x9E3779B97F4A7C15
FILTER_WORDS = 1 << (FILTER_BITS - 6)
READ_MARK = 0xFFFFFFFFFFFFFFFF  # GUARD_READ_MARK: (dev, READ_MARK) marks a device with read rules
READ_BITS = OPERATIONS["read"] | OPERATIONS["read"] << SELF_SHIFT

DEFAULT_MASK = sum(OPERATIONS[op] for op in ("write", "unlink", "rename", "link", "setattr"))
EXIT_DENIED = 4  # not enough privilege (the CLI's convention)
DIR_WALK_LIMIT = 200_000  # files looked at per protected directory for hardlinked ones

# Programs that run a file by reading it: an exec-protected file opened for reading by one of
# them is denied as an exec (guard_file_open). Keyed by inode, so a copy under another name is
# not one of them: `deny: [exec, read]` is the rule no copy gets around (README, guard).
INTERPRETER_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin")
INTERPRETER_NAMES = ("sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "rbash", "fish", "busybox",
                     "python", "python[23]", "python[23].[0-9]*", "pypy*", "perl", "perl5*", "ruby",
                     "ruby[0-9]*", "node", "nodejs", "php", "php[0-9]*", "lua", "lua[0-9]*", "luajit",
                     "tclsh", "tclsh[0-9]*", "awk", "gawk", "mawk", "nawk", "jjs", "Rscript", "guile*")
LOADERS = ("/lib64/ld-linux*.so*", "/lib/ld-linux*.so*", "/lib/*/ld-linux*.so*", "/usr/lib/*/ld-linux*.so*",
           "/lib/ld-musl-*.so*")

TRUST_HINT = ("run it from a program the running policy trusts, e.g. a copy of a shell listed "
              "under `trust:` with `inherit: true`: `/usr/local/sbin/guard-admin -c "
              "'ebpfkit guard stop'` (see README, guard)")


class GuardError(EbpfkitError):
    """A user-facing failure; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = self.exit_code = code


# --- keys as the hooks see them ---------------------------------------------------------

def key_of(path: str, table: MountTable | None = None) -> tuple[int, int]:
    """(dev, ino) of what ``path`` resolves to (symlinks followed), as the hooks see it."""
    return inode_of(path, table)[0]


def _overlay_option(options: str, name: str) -> list[str]:
    """The directories of lowerdir=/upperdir= in an overlay's super options."""
    for item in options.split(","):
        key, _, value = item.partition("=")
        if key == name and value:
            # ':' separates lower layers; a literal one is written '\:'
            parts, cur, i = [], "", 0
            while i < len(value):
                if value[i] == "\\" and i + 1 < len(value):
                    cur += value[i + 1]
                    i += 2
                    continue
                if value[i] == ":":
                    parts.append(cur)
                    cur = ""
                else:
                    cur += value[i]
                i += 1
            return [unescape(p) for p in parts + [cur] if p]
    return []


def layer_paths(path: str, mount: Mount | None) -> list[str]:
    """For ``path`` on an overlayfs mount: the same object in its upper and lower layers
    (those that exist and are not whiteouts). Writing there directly would change what the
    overlay shows; the hooks then see the layer's inode, not the overlay's."""
    if not mount or mount.fstype != "overlay":
        return []
    real = os.path.realpath(path)
    rel = os.path.relpath(real, mount.point)
    if rel.startswith(".."):
        return []
    inside = os.path.normpath(os.path.join(mount.root, rel)).lstrip("/")
    out = []
    for layer in (_overlay_option(mount.super_options, "upperdir")
                  + _overlay_option(mount.super_options, "lowerdir")):
        candidate = os.path.join(layer, inside) if inside not in ("", ".") else layer
        try:
            st = os.lstat(candidate)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            break  # a whiteout: deleted in the overlay, whatever the lower layers hold
        out.append(candidate)
    return out


# --- the maps' contents for a policy ----------------------------------------------------

class Resolution:
    """Map contents for a policy: {key: value} for protected, trusted, protected_exe; the
    filter bitmap follows from ``protected``. ``labels`` name each protected key for the log:
    {"object": the protected path, "matched": the path keyed, when it is another one (an
    ancestor, a layer of an overlay)}."""

    def __init__(self):
        self.protected: dict = {}
        self.trusted: dict = {}
        self.exe: dict = {}
        self.interpreters: dict = {}
        self.warnings: list[str] = []
        self.labels: dict = {}

    def __iter__(self):  # protected, trusted, exe, warnings = resolve(policy)
        return iter((self.protected, self.trusted, self.exe, self.warnings))

    def counts(self) -> dict:
        return {"protected_entries": len(self.protected), "trusted_entries": len(self.trusted),
                "protected_exe_entries": len(self.exe), "interpreter_entries": len(self.interpreters)}


def self_rules(policy_path: str | None) -> list[tuple[str, int]]:
    """What the guard protects of itself, whatever the policy says: its pins, its state
    directory (state.json, the log) and the policy file it watches."""
    rules = [(PIN_DIR, DEFAULT_MASK), (STATE_DIR, DEFAULT_MASK)]
    if policy_path:
        rules.append((os.path.abspath(policy_path), DEFAULT_MASK))
    return rules


def resolve(policy: GuardPolicy, extra: list[tuple[str, int]] = ()) -> Resolution:
    """Map contents for ``policy`` (plus ``extra`` (path, mask) protections), and warnings for
    paths that do not exist (skipped). Trusting a directory trusts every executable regular
    file below it; trusted executables cannot be written by untrusted subjects (their
    inode carries the trust, so a rewrite would carry it over to new code)."""
    res = Resolution()
    table = MountTable()
    rank = {}  # label priority: a rule's own path beats any other reason to key an inode
    ancestors = set()

    def label(key, priority, obj, matched=None):
        if key not in res.labels or priority < rank[key]:
            rank[key] = priority
            res.labels[key] = {"object": obj, **({"matched": matched} if matched else {})}

    def protect(path, mask, priority):
        try:
            key, mount = inode_of(path, table)
        except OSError as exc:
            res.warnings.append(f"{path}: {exc.strerror}; skipped")
            return
        res.protected[key] = res.protected.get(key, 0) | mask
        label(key, priority, path)
        for layer in layer_paths(path, mount):
            with contextlib.suppress(OSError):
                lkey = key_of(layer, table)
                res.protected[lkey] = res.protected.get(lkey, 0) | mask
                label(lkey, priority, path, layer)
        if os.path.isdir(path):
            linked_below(path, mask, priority)
        # its ancestors cannot be renamed (that would move it out of reach of its path)
        parent = os.path.dirname(os.path.realpath(path))
        while parent != "/" and parent not in ancestors:  # above a seen one: all seen
            ancestors.add(parent)
            with contextlib.suppress(OSError):
                akey = key_of(parent, table)
                res.protected[akey] = res.protected.get(akey, 0) | (OPERATIONS["rename"] << SELF_SHIFT)
                label(akey, 3, path, parent)
            parent = os.path.dirname(parent)

    def linked_below(directory, mask, priority):
        # A file below a protected directory is found by walking the hook's dentry up to
        # it, which a hardlink living elsewhere never reaches: such files (more than one
        # link) are keyed themselves.
        seen = 0
        for root, _dirs, files in os.walk(directory):
            seen += len(files)
            if seen > DIR_WALK_LIMIT:
                res.warnings.append(f"{directory}: more than {DIR_WALK_LIMIT} files; hardlinks to "
                                    f"files below the first {DIR_WALK_LIMIT} from outside it are not covered")
                return
            for name in files:
                full = os.path.join(root, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(full)
                    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                        k = key_of(full, table)
                        res.protected[k] = res.protected.get(k, 0) | mask
                        label(k, priority, directory, full)

    def add(table_, path, value):
        try:
            k = key_of(path, table)
        except OSError as exc:
            res.warnings.append(f"{path}: {exc.strerror}; skipped")
            return
        table_[k] = table_[k] | value if k in table_ else value

    for rule in policy.protect:
        protect(rule.path, rule.mask, 0)
    for path, mask in extra:
        protect(path, mask, 1)
    for rule in policy.trust:
        value = TRUST_SELF | (TRUST_INHERIT if rule.inherit else 0)
        for path in _executables(rule.path):
            add(res.trusted, path, value)
            with contextlib.suppress(OSError):
                k = key_of(path, table)
                res.protected[k] = res.protected.get(k, 0) | OPERATIONS["write"]
                label(k, 2, path)
    for rule in policy.processes:
        add(res.exe, rule.path, 1)
    for path in known_interpreters():
        with contextlib.suppress(OSError):
            res.interpreters[key_of(path, table)] = 1
    for path in policy.interpreters:
        add(res.interpreters, path, 1)
    return res


def known_interpreters() -> list[str]:
    """The interpreters and program loaders installed here (executable ELF files: a script is
    never a process's executable): in the system's directories and on $PATH (a pyenv's or a
    venv's python), and the python running this."""
    dirs = dict.fromkeys([*INTERPRETER_DIRS, *filter(os.path.isabs, os.environ.get("PATH", "").split(":"))])
    patterns = [os.path.join(glob.escape(d), name) for d in dirs for name in INTERPRETER_NAMES]
    patterns += [*LOADERS, glob.escape(sys.executable)]
    found = set()
    for pattern in patterns:
        for path in glob.glob(pattern):
            with contextlib.suppress(OSError), open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and f.read(4) == b"\x7fELF":
                    found.add(os.path.realpath(path))
    return sorted(found)


def _executables(path: str):
    if not os.path.isdir(path):
        yield path
        return
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with contextlib.suppress(OSError):
                st = os.stat(full)
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                    yield full


def filter_bit(key: tuple[int, int]) -> int:
    """The filter bit of a key: filter_hit() in guard.bpf.c, bit for bit."""
    dev, ino = key
    h = ((ino ^ (dev << 32)) * FILTER_MULT) & 0xFFFFFFFFFFFFFFFF
    return h >> (64 - FILTER_BITS)


def filter_words(protected: dict) -> dict[int, int]:
    """The filter's non-zero words for the protected {key: mask}: each key, (dev, 0) for each
    of their devices (files elsewhere skip the walk: see dentry_ops() in guard.bpf.c), and
    (dev, READ_MARK) for each device with an object whose reads are denied (reads_guarded())."""
    keys = set(protected)
    keys |= {(dev, 0) for dev, _ in protected}
    keys |= {(dev, READ_MARK) for (dev, _), mask in protected.items() if mask & READ_BITS}
    words: dict[int, int] = {}
    for key in keys:
        bit = filter_bit(key)
        words[bit >> 6] = words.get(bit >> 6, 0) | (1 << (bit & 63))
    return words


# --- pinned maps ------------------------------------------------------------------------

@contextlib.contextmanager
def pinned(name: str, readonly: bool = False, purpose: str = "change the guard"):
    """The guard's pinned map ``name``, typed through its BTF, closed on exit."""
    try:
        m = KernelMap.open_pinned(os.path.join(PIN_DIR, name), readonly)
    except PinError as exc:
        if exc.errno == 1:  # EPERM: the guard refuses its maps to untrusted subjects
            raise GuardError(f"denied: only a subject the running guard trusts may {purpose}; "
                             f"{TRUST_HINT}", EXIT_DENIED) from None
        raise GuardError(f"guard pin {PIN_DIR}/{name} is missing: {os.strerror(exc.errno)}") from None
    with m:
        yield m


def _key(dev: int, ino: int) -> dict:
    """A struct guard_key."""
    return {"dev": dev, "ino": ino}


def _update(m: Map, key, value) -> None:
    try:
        m.update(key, value)
    except MapError as exc:
        if getattr(exc, "errno", None) == 7:  # E2BIG
            raise GuardError("the policy resolves to more entries than the guard's maps hold "
                             "(protected: 16384, trusted: 4096, processes: 1024)") from None
        errno = getattr(exc, "errno", None)
        raise GuardError(f"cannot update guard map: {os.strerror(errno) if errno else exc}") from None


def swap(m: Map, wanted: dict, between=None) -> None:
    """Make the map hold exactly ``wanted``: add and update first, delete stale keys last,
    so an object protected before and after is never unprotected in between. ``between``
    is called after the additions."""
    for (dev, ino), value in wanted.items():
        _update(m, _key(dev, ino), value)
    if between:
        between()
    for key in list(m):
        if (key.dev, key.ino) not in wanted:
            m.delete(key)


def _write_words(m: Map, words: dict[int, int], old: dict[int, int]) -> None:
    for idx in set(words) | set(old):
        if words.get(idx, 0) != old.get(idx, 0):
            _update(m, idx, words.get(idx, 0))


def apply(res: Resolution, maps: dict[str, Map]) -> list[str]:
    """Fill the maps from ``res`` with no window: the filter gains the new keys' bits before
    they are added and loses the stale ones' only after those are deleted."""
    # trust first, protection last: a reload never denies a newly trusted program
    swap(maps["trusted"], res.trusted)
    swap(maps["protected_exe"], res.exe)
    swap(maps["interpreters"], res.interpreters)
    old = filter_words({(k.dev, k.ino): v for k, v in maps["protected"].items()})
    new = filter_words(res.protected)
    union = {i: old.get(i, 0) | new.get(i, 0) for i in set(old) | set(new)}
    _write_words(maps["filter"], union, old)
    # cached verdicts (see guard.bpf.c) go stale when keys are added, and again when removed
    swap(maps["protected"], res.protected, lambda: _bump(maps.get("generation")))
    _bump(maps.get("generation"))
    _write_words(maps["filter"], new, union)
    return res.warnings


def _bump(m: Map | None) -> None:
    if m is None:
        return
    _update(m, GEN_POLICY, (m[GEN_POLICY] + 1) & 0xFFFFFFFF)


def register_self(m: Map, kind: str, ids, access: str = "NOTHING") -> None:
    """The guard's own objects of ``kind`` (PROG, LINK, MAP: enum guard_self_kind), which
    untrusted subjects may not get or detach; ``access`` READABLE lets them open a map
    read-only (enum guard_self_access)."""
    for i in ids:
        _update(m, {"kind": f"GUARD_SELF_{kind}", "id": i}, f"GUARD_SELF_{access}")


# --- policy reloads ---------------------------------------------------------------------

def read_policy(path: str) -> tuple[str, dict]:
    """The policy's text and its signature (which file, which content): the agent reloads
    when it changes. Content, not mtime, which can stay the same over two quick edits."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        data = f.read()
    sig = {"dev": st.st_dev, "ino": st.st_ino, "sha256": hashlib.sha256(data).hexdigest()}
    return data.decode("utf-8", errors="replace"), sig


@contextlib.contextmanager
def locked():
    """Serialises the agent's and `guard reload`'s map updates."""
    try:
        os.makedirs(STATE_DIR, exist_ok=True)
        f = open(LOCK_FILE, "a")
    except PermissionError:  # the state directory is protected from untrusted subjects
        raise GuardError(f"denied: only a subject the running guard trusts may change it; "
                         f"{TRUST_HINT}", EXIT_DENIED) from None
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def install(policy: GuardPolicy, policy_path: str, sig: dict, maps: dict | None = None) -> Resolution:
    """Resolve ``policy`` with the guard's own protections and swap it into the maps; record
    it in the state. Called with locked() held."""
    state = read_state() or {}
    if state.get("mode") and policy.mode != state["mode"] and not state.get("mode_forced"):
        raise GuardError(f"the policy's mode ({policy.mode}) differs from the running guard's "
                         f"({state['mode']}): `guard stop` and `guard start` to change it")
    res = resolve(policy, self_rules(policy_path))
    if maps is None:
        with contextlib.ExitStack() as stack:
            maps = {name: stack.enter_context(pinned(name, purpose="reload the guard's policy"))
                    for name in MAP_NAMES}
            apply(res, maps)
    else:
        apply(res, maps)
    state.update(policy=os.path.abspath(policy_path), rules=policy.to_dict(), applied=sig,
                 warnings=res.warnings, **res.counts())
    write_state(state)
    return res


def reload(policy_path: str) -> list[str]:
    """`guard reload`: parse, resolve and swap in ``policy_path``, which the agent then
    watches. PolicyError for a bad policy (nothing changes)."""
    from ...policy import parse_guard_policy

    if read_state() is None:
        raise GuardError("the guard is not running: `ebpfkit guard start POLICY` first")
    with locked():
        text, sig = read_policy(policy_path)
        policy = parse_guard_policy(text, policy_path)
        res = install(policy, policy_path, sig)
    logfile.append(LOG_FILE, logfile.reload_record(os.path.abspath(policy_path), "applied", "guard reload",
                                                   warnings=res.warnings))
    return res.warnings


# --- state ------------------------------------------------------------------------------

def read_state() -> dict | None:
    if not os.path.isdir(PIN_DIR):
        return None
    try:
        with open(STATE_FILE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_state(state: dict) -> None:
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = STATE_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, STATE_FILE)


def agent_alive(pid) -> bool:
    """The agent process exists and is not a zombie nobody reaped yet."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop() -> bool:
    """Detach every link, unpin everything, stop the agent. False when nothing was there.
    GuardError (EXIT_DENIED) from an untrusted subject, before anything is removed."""
    state = read_state()
    if state is None:
        return False
    pid = state.get("agent_pid")
    links = [os.path.join(PIN_DIR, name) for name in sorted(os.listdir(PIN_DIR)) if name.startswith("link_")]
    programs = [pinned_link_prog_id(path) for path in links]
    for path in links:
        # detaches where the kernel can (LSM links: not before 6.x, EOPNOTSUPP); the guard
        # answers EPERM to an untrusted caller, which stops us here, intact
        if detach_pinned_link(path) == 1:
            raise GuardError(f"denied: only a subject the running guard trusts may stop it; "
                             f"{TRUST_HINT}", EXIT_DENIED)
    try:
        PINS.remove()
    except PermissionError as exc:
        raise GuardError(f"denied: cannot unpin {exc.filename}: only a subject the running guard "
                         f"trusts may stop it; {TRUST_HINT}", EXIT_DENIED) from None
    # the agent exits when it sees its pins gone, dropping the last references
    deadline = time.monotonic() + 15
    while agent_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if agent_alive(pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    # the last reference gone, the kernel releases the links (and their hooks) in a worker:
    # return once it has, so that what the guard denied is allowed when `stop` is done
    deadline = time.monotonic() + 10
    while any(p and prog_exists(p) for p in programs) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.unlink(STATE_FILE)
    return True


def refuse_reason() -> str | None:
    """Why BPF-LSM cannot enforce here, with how to enable it; None when it can."""
    active = features.lsm_active()
    if not active.supported:
        return (f"BPF-LSM is not active ({active.reason}; /sys/kernel/security/lsm lacks 'bpf'). "
                f"Enable it: {features.HINTS.get('lsm_active')}")
    lsm = features.probe("lsm")
    if not lsm.supported:
        return (f"BPF-LSM is active (bpf is listed in /sys/kernel/security/lsm) but this kernel "
                f"refuses LSM programs: {lsm.reason}. Use a kernel that allows BPF LSM "
                f"attachment, or run in the VM harness: `ebpfkit vm run`")
    return None

"""clang driver: C source + cflags + vmlinux.h (+ a precompiled header) -> CO-RE object.

Objects are cached by everything that changes them: the source, the cflags, clang's
version, the kernel BTF's content and (checked like ccache's direct mode) the content of
every header the compile read.
"""

from __future__ import annotations

import os
import time
from collections import namedtuple

from ..errors import CompileError, NotSupportedError
from . import cache
from .btf import KernelBTF, find_kernel_btf
from ._log import get_logger

log = get_logger("ebpfkit.engine.compiler")

CLANG_ENV = "EBPFKIT_CLANG"
MIN_CLANG = 11  # CO-RE relocations and BTF-defined maps
FORMAT = "1"  # bump when the way objects are built changes

# plain strings, like every path on the start path: pathlib (and the re module it imports)
# would cost each start ~9 ms
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # ebpfkit/
PROGRAMS_DIR = os.path.join(PACKAGE_DIR, "programs")  # what every program shares: include/, prebuilt/
INCLUDE_DIR = os.path.join(PROGRAMS_DIR, "include")
PREBUILT_DIR = os.path.join(PROGRAMS_DIR, "prebuilt")

_ARCH = {"x86_64": "x86", "aarch64": "arm64", "arm64": "arm64", "s390x": "s390",
         "ppc64le": "powerpc", "riscv64": "riscv", "loongarch64": "loongarch"}

_MACHINE = os.uname().machine
_FIND = object()  # Compiler(clang=...) default: look for one

_PRELUDE = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
"""


class Clang(namedtuple("_Clang", "path major stamp")):
    """A clang binary: its major version, and a stamp (size, mtime) that changes when it is
    replaced, which keys the object cache without running ``clang --version`` on a start."""

    __slots__ = ()

    @property
    def identity(self) -> str:
        return f"{self.path}|{self.stamp}"

    def version_text(self) -> str:
        """The first line of ``clang --version`` (run once per binary, then remembered)."""
        return _version_text(self.path, self.stamp)

    def version(self) -> tuple:
        import re

        m = re.search(r"version (\d+)\.(\d+)\.(\d+)", self.version_text())
        return tuple(int(x) for x in m.groups()) if m else (self.major, 0, 0)


def _search_dirs() -> list[str]:
    try:
        llvm = sorted(os.path.join("/usr/lib", d, "bin") for d in os.listdir("/usr/lib") if d.startswith("llvm-"))
    except OSError:
        llvm = []
    return os.environ.get("PATH", "").split(os.pathsep) + [d for d in llvm if os.path.isdir(d)]


def _tool_candidates(dirs: list[str], tool: str = "clang") -> list[str]:
    """Executables named TOOL or TOOL-N in ``dirs``, symlinks resolved, each once, in search order."""
    seen, found = set(), []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if name == tool or _numbered(name, tool) is not None:
                path = os.path.realpath(os.path.join(d, name))
                if path not in seen and os.access(path, os.X_OK):
                    seen.add(path)
                    found.append(path)
    return found


def _numbered(name: str, tool: str) -> int | None:
    """N of TOOL-N (clang-14, llvm-symbolizer-14)."""
    suffix = name[len(tool) + 1:]
    return int(suffix) if name.startswith(tool + "-") and suffix.isdigit() else None


def _major_in_path(path: str, tool: str = "clang") -> int | None:
    """N of /usr/lib/llvm-N/bin/TOOL (Debian, Ubuntu) or of .../TOOL-N (Fedora)."""
    *dirs, name = path.split("/")
    for d in dirs:
        if d.startswith("llvm-") and d[5:].isdigit():
            return int(d[5:])
    return _numbered(name, tool)


def llvm_tool_candidates(tool: str) -> list[str]:
    """Every TOOL or TOOL-N (an LLVM tool such as llvm-symbolizer) on PATH and in
    /usr/lib/llvm-N/bin, newest major version first; the search clang uses."""
    found = _tool_candidates(_search_dirs(), tool)
    return sorted(found, key=lambda path: -(_major_in_path(path, tool) or 0))  # stable: PATH order among equals


def _clang_version(path: str) -> Clang:
    st = os.stat(path)
    stamp = f"{st.st_size}|{st.st_mtime_ns}"  # no inode: a VM's 9p view renumbers them
    major = _major_in_path(path)
    if major is not None:
        return Clang(path, major, stamp)
    import re

    m = re.search(r"version (\d+)\.", _version_text(path, stamp))
    return Clang(path, int(m[1]) if m else 0, stamp)


def _version_text(path: str, stamp: str) -> str:
    memo_path = os.path.join(cache.subdir("clang"), "versions.rec")
    memo = cache.read_record(memo_path) or {}
    ident = f"{path}|{stamp}"
    text = memo.get(ident)
    if text is None:
        import subprocess

        out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
        text = out.stdout.splitlines()[0] if out.stdout else ""
        memo[ident] = text
        cache.write_record(memo_path, memo)
    return text


def find_clang(path: str | None = None) -> Clang | None:
    """The newest clang that can target BPF ($EBPFKIT_CLANG wins), or None.

    The choice is remembered per PATH and the search directories' mtimes, so a warm start
    does not list every directory on PATH (installing or removing a clang changes an mtime).
    """
    chosen = path or os.environ.get(CLANG_ENV)
    if chosen == "none":  # use prebuilt objects only
        return None
    if chosen:
        import shutil

        resolved = shutil.which(chosen) or chosen
        if not os.access(resolved, os.X_OK):
            raise NotSupportedError("clang", f"clang at {chosen} ({CLANG_ENV}) is not executable")
        return _clang_version(resolved)
    dirs = _search_dirs()
    ident = "|".join(f"{d}:{_mtime(d)}" for d in dirs)
    memo_path = os.path.join(cache.subdir("clang"), "choice.rec")
    memo = cache.read_record(memo_path)
    if memo and memo.get("ident") == ident and (memo["path"] is None or os.path.exists(memo["path"])):
        return _clang_version(memo["path"]) if memo["path"] else None
    best = None
    for candidate in _tool_candidates(dirs):
        clang = _clang_version(candidate)
        if clang.major >= MIN_CLANG and (best is None or clang.major > best.major):
            best = clang
    cache.write_record(memo_path, {"ident": ident, "path": best.path if best else None})
    return best


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def libbpf_include_dir() -> str:
    """The directory holding bpf/bpf_helpers.h (from libbpf-dev)."""
    for d in [os.environ.get("EBPFKIT_LIBBPF_INCLUDE"), "/usr/include", "/usr/local/include"]:
        if d and os.path.exists(os.path.join(d, "bpf", "bpf_helpers.h")):
            return d
    raise NotSupportedError("libbpf-dev", "libbpf's BPF-side headers (bpf/bpf_helpers.h) are missing",
                            hint="apt-get install libbpf-dev (or set EBPFKIT_LIBBPF_INCLUDE)")


def prebuilt_object(name: str, directory: str | None = None) -> str:
    """Where the prebuilt CO-RE object of the shipped program ``name`` (runqlat.bpf.c) is:
    one directory for all of them, so `ebpfkit build --out-dir` output copies as a whole."""
    return os.path.join(directory or PREBUILT_DIR, name.removesuffix(".c") + ".o")


def is_shipped(source: "Source") -> bool:
    """One of the programs inside the ebpfkit package (a tool's), as opposed to a user's."""
    return source.path is not None and source.path.startswith(PACKAGE_DIR + os.sep)


class Source(namedtuple("_Source", "name text path", defaults=(None,))):
    """A program to compile: a file (``path``), or ``text`` with a ``name`` used in messages."""

    __slots__ = ()

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "Source":
        p = os.fspath(path)
        if not os.path.exists(p):
            raise CompileError(f"no such BPF source: {path}")
        with open(p, "rb") as f:
            return cls(os.path.basename(p), f.read(), os.path.realpath(p))

    @classmethod
    def from_text(cls, text: str | bytes, name: str = "snippet.bpf.c") -> "Source":
        return cls(name, text.encode() if isinstance(text, str) else text, None)


class Compiler:
    """Compiles Sources for one kernel BTF with one clang and extra cflags.

    Each program is compiled against a slim vmlinux.h holding only the kernel types it
    names (see slimheader); if that falls short, against the full vmlinux.h through a
    precompiled header.
    """

    def __init__(self, btf: KernelBTF | None = None, clang: Clang | None = _FIND, cflags=(),
                 use_pch: bool = True, slim: bool = True):
        self.btf = btf or find_kernel_btf()
        self.clang = find_clang() if clang is _FIND else clang
        self.cflags = tuple(cflags)
        self.use_pch = use_pch
        self.slim = slim

    def base_flags(self) -> list[str]:
        """Flags for every compile; the directory holding vmlinux.h comes first, added per compile."""
        arch = _ARCH.get(_MACHINE, _MACHINE)
        return ["-target", "bpf", "-g", "-O2", f"-D__TARGET_ARCH_{arch}", "-D__EBPFKIT__",
                "-fno-color-diagnostics", "-Wno-unused-command-line-argument",
                "-Wno-compare-distinct-pointer-types", "-Wno-address-of-packed-member",
                f"-I{INCLUDE_DIR}", f"-idirafter{libbpf_include_dir()}", *self.cflags]

    def key(self, source: Source) -> str:
        """What the object depends on besides the headers' content (checked after): the
        directories headers are found in are part of it, or two checkouts sharing a cache
        would take each other's objects, checked against the other tree's headers."""
        clang_id = self.clang.identity if self.clang else "no-clang"
        source_dir = os.path.dirname(source.path) if source.path is not None else ""
        return cache.digest(FORMAT, source.name, source.text, "\0".join(self.cflags), INCLUDE_DIR,
                            source_dir, clang_id, self.btf.digest, _MACHINE)

    def compile(self, source: Source) -> str:
        """Return the path of the object for ``source``, compiling it if not cached."""
        objects = cache.subdir("objects")
        key = self.key(source)
        obj = os.path.join(objects, f"{key}.o")
        manifest = os.path.join(objects, f"{key}.rec")
        if os.path.exists(obj) and _deps_unchanged(cache.read_record(manifest)):
            log.debug("cache hit for %s: %s", source.name, obj)
            return obj
        if self.clang is None:
            prebuilt = prebuilt_object(source.name)
            # only for ebpfkit's own programs: a user's runqlat.bpf.c is another program
            if is_shipped(source) and os.path.exists(prebuilt):
                log.info("clang not found; using the prebuilt CO-RE object %s", prebuilt)
                return prebuilt
            raise NotSupportedError("clang", f"cannot compile {source.name}: no clang >= {MIN_CLANG} found",
                                    hint=f"apt-get install clang (or set {CLANG_ENV}), or build ebpfkit's prebuilt "
                                         "CO-RE objects where clang exists and ship them")
        started = time.monotonic()
        with _Job(source, obj) as job:
            deps = self._build(job)
        cache.write_record(manifest, {"deps": deps})
        log.info("compiled %s in %.2fs", source.name, time.monotonic() - started)
        return obj

    # -- internals --

    def _build(self, job: "_Job") -> dict:
        flags = self.base_flags()
        # the source's own directory comes last: the precompiled header's key stays per kernel
        local = [f"-I{os.path.dirname(job.source.path)}"] if job.source.path is not None else []
        if self.slim:
            deps = self._build_slim(job, flags + local)
            if deps is not None:
                return deps
        return self._build_full(job, flags, local)

    def _clang(self, job: "_Job", header_flags: list, flags: list):
        import subprocess

        cmd = job.compile_argv(self.clang.path, [*header_flags, *flags], [str(job.src_file)])
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    def _build_slim(self, job: "_Job", flags: list) -> dict | None:
        """Compile against the program's slim vmlinux.h; None when the full one is needed."""
        from . import slimheader

        # clang loads on the other CPU while this one reads the kernel's types and the
        # program's names, then waits for the program until its header is written
        early = _EarlyClang.start(self.clang.path, job, [f"-I{job.slim_dir}", *flags])
        try:
            try:
                types = slimheader.KernelTypes(self.btf)
            except (OSError, ValueError) as exc:
                log.info("no slim vmlinux.h (%s); using the full one", exc)
                return None
            with types:
                return self._compile_slim(job, flags, types, early)
        finally:
            if early:
                early.kill()  # a no-op once it finished

    def _compile_slim(self, job: "_Job", flags: list, types, early) -> dict | None:
        from . import slimheader

        try:
            names = slimheader.program_names(job.src_file, _include_dirs(flags))
        except OSError:
            return None  # an unreadable include: the full compile reports it properly
        header = os.path.join(job.slim_dir, "vmlinux.h")
        for _ in range(3):
            type_ids = slimheader.select(types, names)
            types.write(header, type_ids)
            if early:  # the name index goes to the cache while clang compiles
                out = early.finish(meanwhile=types.save_index)
            else:
                out = self._clang(job, [f"-I{job.slim_dir}"], flags)
            early = None
            if out.returncode == 0:
                log.info("%s: slim vmlinux.h with %d of %d kernel types", job.source.name,
                         len(type_ids), types.count())
                job.commit()
                return _read_depfile(job.depfile, exclude={str(job.src_file), str(header)})
            more = {n.encode() for n in slimheader.missing_names(out.stderr)} - names.spelled
            more = {n for n in more if types.ids(n)}
            if not more:
                if str(header) not in out.stderr:
                    # nothing the kernel has is missing: the program's own error, which
                    # the full header would only repeat, slower
                    raise _compile_error(job.source, job.src_file, out.stderr)
                break
            log.debug("slim vmlinux.h lacked %s; adding them", b", ".join(sorted(more)).decode())
            names = names._replace(spelled=names.spelled | more)
        log.info("%s: the slim vmlinux.h fell short; compiling against the full one", job.source.name)
        return None

    def _build_full(self, job: "_Job", flags: list, local: list) -> dict:
        header_flags = [f"-I{os.path.dirname(self.btf.vmlinux_h())}"]
        # The precompiled header pays off from the second program on; on a cold start
        # (vmlinux.h just generated) building it would double the first compile's time.
        pch = self._pch(header_flags + flags) if self.use_pch and not self.btf.generated_now else None
        flags = flags + local
        if pch:
            out = self._clang(job, ["-include-pch", str(pch[0]), *header_flags], flags)
            if out.returncode == 0:
                job.commit()
                deps = _read_depfile(job.depfile, exclude={str(job.src_file)})
                deps.update(pch[1])
                return deps
            if "precompiled header" not in out.stderr:
                raise _compile_error(job.source, job.src_file, out.stderr)
            log.info("precompiled header is stale; compiling without it")
        out = self._clang(job, header_flags, flags)
        if out.returncode != 0:
            raise _compile_error(job.source, job.src_file, out.stderr)
        job.commit()
        return _read_depfile(job.depfile, exclude={str(job.src_file)})

    def _pch(self, flags: list[str]):
        """(path, deps) of the precompiled prelude for these flags, built on first use."""
        import subprocess

        key = cache.digest(FORMAT, _PRELUDE, "\0".join(flags), self.clang.identity, self.btf.digest)
        d = cache.subdir(f"pch/{key}")
        pch, manifest = os.path.join(d, "prelude.pch"), os.path.join(d, "prelude.rec")
        info = cache.read_record(manifest)
        if os.path.exists(pch) and _deps_unchanged(info):
            return pch, info["deps"]
        prelude = os.path.join(d, "prelude.h")
        with open(prelude, "w") as f:
            f.write(_PRELUDE)
        depfile = os.path.join(d, f"prelude.{os.getpid()}.d")
        tmp = os.path.join(d, f".prelude.{os.getpid()}.pch")
        out = subprocess.run([self.clang.path, *flags, "-x", "c-header", str(prelude), "-MD", "-MF",
                              str(depfile), "-o", str(tmp)], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            log.info("building the precompiled header failed; compiling without it:\n%s", out.stderr)
            return None
        os.replace(tmp, pch)
        deps = _read_depfile(depfile, exclude={str(prelude)})
        os.unlink(depfile)
        cache.write_record(manifest, {"deps": deps})
        return pch, deps


class _EarlyClang:
    """A compile started before its input is ready. clang-14 spends ~30 ms loading before it
    reads a line of C, most of a small program's compile: started early, it does that on the
    other CPU, then blocks reading its main file from a pipe, which is one line including the
    program once the header is written. (The program stays a file of its own, so its name in
    the object's line info and in clang's messages is unchanged.)"""

    def __init__(self, proc, program: str):
        self.proc, self.program = proc, program

    @classmethod
    def start(cls, clang: str, job: "_Job", flags: list) -> "_EarlyClang | None":
        import subprocess

        program = str(job.src_file)
        if '"' in program or "\n" in program:
            return None  # cannot be spelled in an #include line
        # -main-file-name: the object's file symbol and debug info name the program, not "-"
        cmd = job.compile_argv(clang, [*flags, "-Xclang", "-main-file-name", "-Xclang", program],
                               ["-x", "c", "-"])
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        return cls(proc, program)

    def finish(self, meanwhile=None):
        """Hand clang the program and call ``meanwhile()`` while it compiles; clang's
        result like subprocess.run's."""
        import subprocess

        try:
            self.proc.stdin.write(f'#include "{self.program}"\n')
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # clang is gone already: its stderr says why
        if meanwhile:
            meanwhile()
        err = self.proc.stderr.read()  # stdin is closed and stdout unused: nothing can block
        self.proc.wait()
        self.proc.stderr.close()
        err = "".join(line for line in err.splitlines(keepends=True)
                      if not line.startswith("In file included from <stdin>:"))
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, "", err)

    def kill(self) -> None:
        """Stop it, if it still runs (no-op once finished)."""
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stderr):
                pipe.close()


class _Job:
    """One compile's files: the source on disk, a private work directory, the depfile and
    the object written under a temporary name until it is complete."""

    def __init__(self, source: Source, obj: str):
        self.source, self.obj = source, obj
        self.work_dir = os.path.join(cache.subdir("work"), f"{os.getpid()}-{os.path.basename(obj)[:16]}")
        # not work_dir itself: a text source there would find it by #include "vmlinux.h"
        # even when compiling against the full header
        self.slim_dir = os.path.join(self.work_dir, "slim")

    def __enter__(self):
        os.makedirs(self.slim_dir, exist_ok=True)
        if self.source.path is None:
            # the user's file name stays in the BTF line info that verifier logs quote
            # ("@ name.bpf.c:12", not "@ 1234-name.bpf.c:12")
            self.src_file = os.path.join(self.work_dir, self.source.name)
            with open(self.src_file, "wb") as f:
                f.write(self.source.text)
        else:
            self.src_file = self.source.path
        self.depfile = os.path.join(self.work_dir, "deps.d")
        directory, name = os.path.split(self.obj)
        self.tmp_obj = os.path.join(directory, f".{name}.{os.getpid()}")
        return self

    def compile_argv(self, clang: str, flags: list, source: list) -> list:
        """clang compiling ``source`` (a file, or ``-x c -``) into this job's object and depfile."""
        return [clang, *flags, "-MD", "-MF", str(self.depfile), "-c", *source, "-o", str(self.tmp_obj)]

    def commit(self) -> None:
        os.replace(self.tmp_obj, self.obj)

    def __exit__(self, *exc):
        import shutil

        shutil.rmtree(self.work_dir, ignore_errors=True)
        try:
            os.unlink(self.tmp_obj)
        except FileNotFoundError:
            pass


def _include_dirs(flags: list) -> list:
    """The -I, -isystem and -idirafter directories of a clang command line, in search order."""
    found: dict = {"-I": [], "-isystem": [], "-idirafter": []}
    for i, flag in enumerate(flags):
        for option, dirs in found.items():
            if flag.startswith(option):
                dirs.append(flag[len(option):] or (flags[i + 1] if i + 1 < len(flags) else ""))
                break
    return [d for dirs in found.values() for d in dirs]


def _read_depfile(path: str, exclude: set) -> dict:
    """{header path: [stat key, content digest]} from a make-style depfile."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    _, _, rest = text.partition(":")
    deps = {}
    for name in rest.split():
        if name in exclude or name.endswith(".pch"):
            continue
        real = os.path.realpath(name)
        deps[real] = [cache.stat_key(real), cache.file_digest(real)]
    return deps


def _deps_unchanged(manifest) -> bool:
    if not manifest:
        return False
    for path, (stat_key, digest) in manifest["deps"].items():
        try:
            if cache.stat_key(path) != stat_key and cache.file_digest(path) != digest:
                return False
        except OSError:
            return False
    return True


_DIAG = r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"


def _compile_error(source: Source, src_file: str, stderr: str) -> CompileError:
    """A CompileError whose message shows file:line, the source around it and clang's words."""
    import re

    diagnostics, parts = [], []
    for m in re.finditer(_DIAG, stderr, re.M):
        file = source.name if m["file"] == str(src_file) else m["file"]
        line, col = int(m["line"]), int(m["col"])
        context = _context(m["file"], line)
        diagnostics.append({"file": file, "line": line, "col": col, "severity": m["sev"],
                            "message": m["msg"], "source": context})
        if m["sev"] in ("error", "fatal error"):
            parts.append(f"{file}:{line}:{col}: {m['sev']}: {m['msg']}\n{context}")
    errors = sum(d["severity"] != "warning" and d["severity"] != "note" for d in diagnostics)
    head = f"clang could not compile {source.name} ({errors} error{'s' if errors != 1 else ''})"
    body = "\n".join(parts[:5]) if parts else stderr.strip()
    if len(parts) > 5:
        body += f"\n... and {len(parts) - 5} more errors"
    return CompileError(f"{head}\n{body}", diagnostics, stderr)


def _context(path: str, line: int, around: int = 2) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    lo, hi = max(1, line - around), min(len(lines), line + around)
    return "\n".join(f"{'>' if n == line else ' '} {n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))

"""clang driver: C source + cflags + vmlinux.h (+ a precompiled header) -> CO-RE object.

Objects are cached by everything that changes them: the source, the cflags, clang's
version, the kernel BTF's content and (checked like ccache's direct mode) the content of
every header the compile read.
"""

from __future__ import annotations

import os
import re
import time
from collections import namedtuple
from pathlib import Path

from ..errors import CompileError, NotSupportedError
from . import cache
from .btf import KernelBTF, find_kernel_btf
from ._log import get_logger

log = get_logger("ebpfkit.engine.compiler")

CLANG_ENV = "EBPFKIT_CLANG"
MIN_CLANG = 11  # CO-RE relocations and BTF-defined maps
FORMAT = "1"  # bump when the way objects are built changes

PROGRAMS_DIR = Path(__file__).resolve().parent.parent / "programs"
INCLUDE_DIR = PROGRAMS_DIR / "include"
PREBUILT_DIR = PROGRAMS_DIR / "prebuilt"

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


class Clang(namedtuple("_Clang", "path version text")):
    __slots__ = ()

    @property
    def identity(self) -> str:
        return f"{self.path}|{self.text}"


def _search_dirs() -> list[str]:
    return os.environ.get("PATH", "").split(os.pathsep) + sorted(
        str(p) for p in Path("/usr/lib").glob("llvm-*/bin"))


def _clang_candidates(dirs: list[str]) -> list[str]:
    seen, found = set(), []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if name.startswith("clang") and _CLANG_NAME.fullmatch(name):
                path = os.path.realpath(os.path.join(d, name))
                if path not in seen and os.access(path, os.X_OK):
                    seen.add(path)
                    found.append(path)
    return found


_CLANG_NAME = re.compile(r"clang(-\d+)?")


def _clang_version(path: str) -> Clang:
    memo_path = cache.subdir("clang") / "versions.rec"
    memo = cache.read_record(memo_path) or {}
    st = os.stat(path)
    ident = f"{path}|{st.st_size}|{st.st_mtime_ns}"  # no inode: a VM's 9p view renumbers them
    text = memo.get(ident)
    if text is None:
        import subprocess

        out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
        text = out.stdout.splitlines()[0] if out.stdout else ""
        memo[ident] = text
        cache.write_record(memo_path, memo)
    m = re.search(r"version (\d+)\.(\d+)\.(\d+)", text)
    version = tuple(int(x) for x in m.groups()) if m else (0, 0, 0)
    return Clang(path, version, text)


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
    memo_path = cache.subdir("clang") / "choice.rec"
    memo = cache.read_record(memo_path)
    if memo and memo.get("ident") == ident and (memo["path"] is None or os.path.exists(memo["path"])):
        return _clang_version(memo["path"]) if memo["path"] else None
    best = None
    for candidate in _clang_candidates(dirs):
        clang = _clang_version(candidate)
        if clang.version[0] >= MIN_CLANG and (best is None or clang.version > best.version):
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


class Source(namedtuple("_Source", "name text path", defaults=(None,))):
    """A program to compile: a file (``path``), or ``text`` with a ``name`` used in messages."""

    __slots__ = ()

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "Source":
        p = Path(path)
        if not p.exists():
            builtin = PROGRAMS_DIR / p.name
            if builtin.exists():
                p = builtin
            else:
                raise CompileError(f"no such BPF source: {path}")
        return cls(p.name, p.read_bytes(), p.resolve())

    @classmethod
    def from_text(cls, text: str | bytes, name: str = "snippet.bpf.c") -> "Source":
        return cls(name, text.encode() if isinstance(text, str) else text, None)


class Compiler:
    """Compiles Sources for one kernel BTF with one clang and extra cflags."""

    def __init__(self, btf: KernelBTF | None = None, clang: Clang | None = _FIND, cflags=(),
                 use_pch: bool = True):
        self.btf = btf or find_kernel_btf()
        self.clang = find_clang() if clang is _FIND else clang
        self.cflags = tuple(cflags)
        self.use_pch = use_pch

    def base_flags(self) -> list[str]:
        arch = _ARCH.get(_MACHINE, _MACHINE)
        return ["-target", "bpf", "-g", "-O2", f"-D__TARGET_ARCH_{arch}", "-D__EBPFKIT__",
                "-fno-color-diagnostics", "-Wno-unused-command-line-argument",
                "-Wno-compare-distinct-pointer-types", "-Wno-address-of-packed-member",
                f"-I{self.btf.vmlinux_h().parent}", f"-I{INCLUDE_DIR}", f"-I{PROGRAMS_DIR}",
                f"-idirafter{libbpf_include_dir()}", *self.cflags]

    def key(self, source: Source) -> str:
        clang_id = self.clang.identity if self.clang else "no-clang"
        return cache.digest(FORMAT, source.name, source.text, "\0".join(self.cflags),
                            clang_id, self.btf.digest, _MACHINE)

    def compile(self, source: Source) -> Path:
        """Return the path of the object for ``source``, compiling it if not cached."""
        objects = cache.subdir("objects")
        key = self.key(source)
        obj = objects / f"{key}.o"
        manifest = objects / f"{key}.rec"
        if obj.exists() and _deps_unchanged(cache.read_record(manifest)):
            log.debug("cache hit for %s: %s", source.name, obj)
            return obj
        if self.clang is None:
            prebuilt = PREBUILT_DIR / (source.name.removesuffix(".c") + ".o")
            if source.path and prebuilt.exists():
                log.info("clang not found; using the prebuilt CO-RE object %s", prebuilt)
                return prebuilt
            raise NotSupportedError("clang", f"cannot compile {source.name}: no clang >= {MIN_CLANG} found",
                                    hint=f"apt-get install clang (or set {CLANG_ENV}), or run `ebpfkit build` "
                                         "where clang exists to ship prebuilt objects")
        started = time.monotonic()
        deps = self._run_clang(source, obj)
        cache.write_record(manifest, {"deps": deps})
        log.info("compiled %s in %.2fs", source.name, time.monotonic() - started)
        return obj

    # -- internals --

    def _run_clang(self, source: Source, obj: Path) -> dict:
        import subprocess

        work = cache.subdir("work")
        if source.path is None:
            # a directory of its own keeps the user's file name in the BTF line info that
            # verifier logs quote ("@ name.bpf.c:12", not "@ 1234-name.bpf.c:12")
            src_file = work / str(os.getpid()) / source.name
            src_file.parent.mkdir(exist_ok=True)
            src_file.write_bytes(source.text)
        else:
            src_file = source.path
        depfile = work / f"{os.getpid()}-{obj.stem}.d"
        tmp_obj = obj.with_name(f".{obj.name}.{os.getpid()}")
        flags = self.base_flags()
        # The precompiled header pays off from the second program on; on a cold start
        # (vmlinux.h just generated) building it would double the first compile's time.
        pch = self._pch(flags) if self.use_pch and not self.btf.generated_now else None
        if source.path is not None:
            flags.append(f"-I{source.path.parent}")  # after the PCH: its key stays per kernel
        pch_deps: dict = {}
        try:
            for attempt in ("pch", "plain") if pch else ("plain",):
                cmd = [self.clang.path, *flags, "-MD", "-MF", str(depfile), "-c", str(src_file),
                       "-o", str(tmp_obj)]
                if attempt == "pch":
                    cmd[1:1] = ["-include-pch", str(pch[0])]
                out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if out.returncode == 0:
                    if attempt == "pch":
                        pch_deps = pch[1]
                    break
                if attempt == "pch" and "precompiled header" in out.stderr:
                    log.info("precompiled header is stale; compiling without it")
                    continue
                raise _compile_error(source, src_file, out.stderr)
            os.replace(tmp_obj, obj)
            deps = _read_depfile(depfile, exclude={str(src_file)})
        finally:
            for p in (depfile, tmp_obj) + ((src_file,) if source.path is None else ()):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            if source.path is None:
                try:
                    src_file.parent.rmdir()
                except OSError:
                    pass
        deps.update(pch_deps)
        return deps

    def _pch(self, flags: list[str]):
        """(path, deps) of the precompiled prelude for these flags, built on first use."""
        import subprocess

        key = cache.digest(FORMAT, _PRELUDE, "\0".join(flags), self.clang.identity, self.btf.digest)
        d = cache.subdir(f"pch/{key}")
        pch, manifest = d / "prelude.pch", d / "prelude.rec"
        info = cache.read_record(manifest)
        if pch.exists() and _deps_unchanged(info):
            return pch, info["deps"]
        prelude = d / "prelude.h"
        prelude.write_text(_PRELUDE)
        depfile = d / f"prelude.{os.getpid()}.d"
        tmp = d / f".prelude.{os.getpid()}.pch"
        out = subprocess.run([self.clang.path, *flags, "-x", "c-header", str(prelude), "-MD", "-MF",
                              str(depfile), "-o", str(tmp)], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            log.info("building the precompiled header failed; compiling without it:\n%s", out.stderr)
            return None
        os.replace(tmp, pch)
        deps = _read_depfile(depfile, exclude={str(prelude)})
        depfile.unlink()
        cache.write_record(manifest, {"deps": deps})
        return pch, deps


def _read_depfile(path: Path, exclude: set) -> dict:
    """{header path: [stat key, content digest]} from a make-style depfile."""
    text = path.read_text().replace("\\\n", " ")
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


_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): "
                   r"(?P<msg>.*)$", re.M)


def _compile_error(source: Source, src_file: Path, stderr: str) -> CompileError:
    """A CompileError whose message shows file:line, the source around it and clang's words."""
    diagnostics, parts = [], []
    for m in _DIAG.finditer(stderr):
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
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    lo, hi = max(1, line - around), min(len(lines), line + around)
    return "\n".join(f"{'>' if n == line else ' '} {n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))

"""Source-level frames of stacks: function (C++ demangled), file:line, inline frames, module.

Debug info is read by llvm-symbolizer (it ships with the clang ebpfkit compiles with), not here:
one persistent process answers batches of ``"FILE" 0xVADDR`` lines in JSON, and its answers are
cached per (file identity, address). Where it is missing, hangs or dies, or a file has no symbols
it can read, the ELF symbol tables of ``symbols.py`` name the function (no file:line), and past
that a frame is "[unknown]" with its module::

    for frames in user_source_frames(pid, [ip1, ip2]):
        for frame in frames:
            print(frame)        # "inlined: helper (x.c:3) [prog]", "leak_here (x.c:12) [prog]"
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import selectors
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from typing import NamedTuple, Sequence

from ..errors import EbpfkitError
from .symbols import UNKNOWN, KernelSymbols, Location, ProcessSymbols, Symbolizer, default_symbolizer, file_identity

log = logging.getLogger("ebpfkit.engine.srclines")

SYMBOLIZER_ENV = "EBPFKIT_LLVM_SYMBOLIZER"  # a path or name; "none": ELF symbol tables only
SYMBOLIZER_ARGS = ("--output-style=JSON", "--inlines", "--demangle", "--functions=linkage")


class SourceFrame(NamedTuple):
    function: str  # demangled; "[unknown]" when nothing is known
    file: str | None  # source file path as in the debug info, None without debug info
    line: int | None
    inlined: bool  # True: this frame was inlined into the next (outer) one
    module: str  # basename of the ELF file, a kernel module, "kernel", a pseudo mapping ([vdso]); "" if none

    def __str__(self) -> str:
        text = self.function
        if self.file:
            name = os.path.basename(self.file)
            text += f" ({name}:{self.line})" if self.line else f" ({name})"
        if self.module:
            text += f" [{self.module}]"
        return f"inlined: {text}" if self.inlined else text


UNKNOWN_FRAME = SourceFrame(UNKNOWN, None, None, False, "")  # an address outside every known mapping


# --------------------------------------------------------------------------------------------
# the llvm-symbolizer process
# --------------------------------------------------------------------------------------------

def find_llvm_symbolizer() -> str | None:
    """The llvm-symbolizer to use: $EBPFKIT_LLVM_SYMBOLIZER, else the one beside the clang the
    engine compiles with, else the newest llvm-symbolizer[-N] on PATH or in /usr/lib/llvm-N/bin."""
    chosen = os.environ.get(SYMBOLIZER_ENV)
    if chosen == "none":
        return None
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            log.warning("%s=%s is not an executable: stacks get no file:line", SYMBOLIZER_ENV, chosen)
        return found
    from .compiler import find_clang, llvm_tool_candidates

    try:
        clang = find_clang()
    except EbpfkitError:
        clang = None
    if clang is not None:
        beside = os.path.join(os.path.dirname(os.path.realpath(clang.path)), "llvm-symbolizer")
        if os.access(beside, os.X_OK):
            return beside
    candidates = llvm_tool_candidates("llvm-symbolizer")
    return candidates[0] if candidates else None


class SymbolizerFailed(EbpfkitError):
    """llvm-symbolizer could not start, died, hung, or answered out of step."""


class LlvmSymbolizer:
    """One persistent llvm-symbolizer. ``symbolize`` sends a batch and reads one JSON line per
    request; a process that makes no progress for ``timeout`` seconds or dies is replaced once,
    after a second failure this object answers None to everything (callers fall back)."""

    MAX_FAILURES = 2

    def __init__(self, path: str, timeout: float = 10.0):
        self.path = path
        self.timeout = timeout  # without any output; loading a big file's DWARF takes a while
        self.problem: str | None = None  # set once it is given up
        self._proc: subprocess.Popen | None = None
        self._failures = 0
        self._sent: dict[str, tuple] = {}  # path -> identity of the file it named when sent
        self._lock = threading.Lock()

    def symbolize(self, requests: Sequence[tuple[str, tuple, int]]) -> list[list[tuple] | None]:
        """For each (path, file identity, vaddr): [(function, file, line), ...] innermost first,
        [] when the file has no symbol there, None when the symbolizer cannot tell."""
        if not requests:
            return []
        with self._lock:
            while self.problem is None:
                try:
                    self._forget_replaced(requests)
                    return self._exchange(requests)
                except (OSError, SymbolizerFailed) as exc:
                    self._failed(exc)
        return [None] * len(requests)

    def _failed(self, exc: Exception) -> None:
        self.close(wait=0)
        self._failures += 1
        if isinstance(exc, (FileNotFoundError, PermissionError)) or self._failures >= self.MAX_FAILURES:
            self.problem = f"{self.path}: {exc}"
            log.warning("llvm-symbolizer given up (%s): stacks show ELF symbol names without file:line",
                        self.problem)
        else:
            log.info("llvm-symbolizer restarted: %s", exc)

    def _forget_replaced(self, requests) -> None:
        """llvm-symbolizer caches files by path: a path now naming another file needs a new process."""
        if any(self._sent.get(path, identity) != identity for path, identity, _ in requests):
            self.close()
        self._sent.update((path, identity) for path, identity, _ in requests)

    def _start(self) -> subprocess.Popen:
        if self._proc is None:
            # its own session: a Ctrl-C meant for the tool must not kill it before the last report
            self._proc = subprocess.Popen([self.path, *SYMBOLIZER_ARGS], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0,
                                          start_new_session=True)
            os.set_blocking(self._proc.stdin.fileno(), False)
            os.set_blocking(self._proc.stdout.fileno(), False)
        return self._proc

    def _exchange(self, requests) -> list[list[tuple] | None]:
        proc = self._start()
        pending = "".join(f'"{path}" {vaddr:#x}\n' for path, _, vaddr in requests).encode()
        lines = _Lines()
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
            deadline = time.monotonic() + self.timeout
            while len(lines) < len(requests):
                events = sel.select(max(0.0, deadline - time.monotonic()))
                if not events:
                    raise SymbolizerFailed(f"no answer in {self.timeout:g} s")
                for key, _ in events:
                    if key.fileobj is proc.stdin:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:1 << 16]):]
                        if not pending:
                            sel.unregister(proc.stdin)
                    else:
                        chunk = os.read(proc.stdout.fileno(), 1 << 16)
                        if not chunk:
                            raise SymbolizerFailed(f"exited with {proc.wait()}")
                        lines.feed(chunk)
                        deadline = time.monotonic() + self.timeout
        return [_parse_answer(line, vaddr) for line, (_, _, vaddr) in zip(lines.done, requests)]

    def close(self, wait: float = 1.0) -> None:
        """Stop the process: it exits when its input closes; killed if it has not in ``wait`` s."""
        proc, self._proc = self._proc, None
        self._sent.clear()
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Lines:
    """Complete lines out of chunks."""

    def __init__(self):
        self.done: list[bytes] = []
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        *complete, self._rest = (self._rest + chunk).split(b"\n")
        self.done.extend(line for line in complete if line.strip())

    def __len__(self) -> int:
        return len(self.done)


def _parse_answer(line: bytes, vaddr: int) -> list[tuple] | None:
    """One JSON answer -> [(function, file, line), ...]; None for an error (unreadable file)."""
    try:
        answer = json.loads(line)
        address = int(answer.get("Address", "-1"), 16)
    except (ValueError, TypeError, AttributeError):
        raise SymbolizerFailed(f"unexpected answer {line[:200]!r}") from None
    if address != vaddr:
        raise SymbolizerFailed(f"answer for {address:#x} where {vaddr:#x} was asked: out of step")
    if "Error" in answer:
        return None
    frames = []
    for entry in answer.get("Symbol", ()):
        function = entry.get("FunctionName") or ""
        if not function:
            continue
        frames.append((function, entry.get("FileName") or None, entry.get("Line") or None))
    return frames


_symbolizer: LlvmSymbolizer | None = None
_symbolizer_found = False
_symbolizer_lock = threading.Lock()


def llvm_symbolizer() -> LlvmSymbolizer | None:
    """The process-wide LlvmSymbolizer (None without llvm-symbolizer), stopped at exit."""
    global _symbolizer, _symbolizer_found
    with _symbolizer_lock:
        if not _symbolizer_found:
            _symbolizer_found = True
            path = find_llvm_symbolizer()
            if path is None:
                log.info("no llvm-symbolizer: stacks show ELF symbol names without file:line")
            else:
                _symbolizer = LlvmSymbolizer(path)
                atexit.register(_symbolizer.close)
        return _symbolizer


def reset_llvm_symbolizer() -> None:
    """Stop the process-wide symbolizer and look for one again on next use (tests, new PATH)."""
    global _symbolizer, _symbolizer_found
    with _symbolizer_lock:
        if _symbolizer is not None:
            _symbolizer.close()
            atexit.unregister(_symbolizer.close)
        _symbolizer, _symbolizer_found = None, False
        _answers.clear()


# --------------------------------------------------------------------------------------------
# addresses -> frames
# --------------------------------------------------------------------------------------------

_ANSWERS_MAX = 1 << 16
_answers: OrderedDict = OrderedDict()  # (file identity, vaddr) -> [(function, file, line), ...]


class _Place(NamedTuple):
    where: Location
    path: str | None  # the file as llvm-symbolizer should open it; None: do not ask it


def user_source_frames(pid: int, addresses: Sequence[int], *, return_addresses_from: int | None = None,
                       symbolizer: Symbolizer | None = None) -> list[list[SourceFrame]]:
    """For each address in pid's address space: the frames there, innermost (inlined) first, then the
    function that holds them. Falls back to the existing ELF symbol tables (symbols.ProcessSymbols) when
    llvm-symbolizer is missing or the file has no debug info, and to "[unknown]" with the module.

    ``return_addresses_from``: the addresses are a stack (innermost first) whose addresses from
    this index on are return addresses: those resolve at their call instruction (address - 1), so
    file:line is the line of the call, not of what follows it. 1 for a stack taken at the
    current instruction (a sample, a uprobe), 0 for one taken at a uretprobe."""
    return user_source_stacks(pid, [addresses], return_addresses_from=return_addresses_from,
                              symbolizer=symbolizer, flat=False)[0]


def user_source_stacks(pid: int, stacks: Sequence[Sequence[int]], *, return_addresses_from: int | None = 1,
                       symbolizer: Symbolizer | None = None, flat: bool = True) -> list[list]:
    """Several stacks of pid (each innermost first) resolved in one exchange with llvm-symbolizer:
    for each stack its SourceFrames, inlined frames in place (``flat``), else one list per address
    as user_source_frames gives."""
    proc = (symbolizer or default_symbolizer()).process(pid)
    seen: dict = {}  # Mapping -> path for llvm-symbolizer, once per call
    places = [[_place(proc, addr, return_addresses_from is not None and i >= return_addresses_from, seen)
               for i, addr in enumerate(stack)] for stack in stacks]
    answers = iter(_ask([place for stack in places for place in stack]))
    out = []
    for stack in places:
        per_address = [_frames(place.where, next(answers)) for place in stack]
        out.append([frame for frames in per_address for frame in frames] if flat else per_address)
    return out


def _place(proc: ProcessSymbols | None, addr: int, returned: bool, seen: dict) -> _Place:
    if proc is None:  # gone before its maps were read
        return _Place(Location(None, addr), None)
    where = proc.locate(addr - 1 if returned else addr)
    return _Place(where, _symbolizer_path(proc, where, seen))


def kernel_source_frames(addresses: Sequence[int], *, kernel: KernelSymbols | None = None) -> list[list[SourceFrame]]:
    """Kernel addresses by /proc/kallsyms: the function and its module ("kernel" for vmlinux);
    no file:line (there is no vmlinux debug info to read)."""
    kernel = kernel or default_symbolizer().kernel
    frames = []
    for addr in addresses:
        sym = kernel.resolve(addr)
        frames.append([SourceFrame(sym.name, None, None, False, sym.module or "kernel")])
    return frames


def _symbolizer_path(proc: ProcessSymbols, where: Location, seen: dict) -> str | None:
    """The mapped file under a path that still names it, its own path first (llvm-symbolizer
    finds separate debug files beside it, and opens it once for every process mapping it)."""
    if where.elf is None or where.vaddr is None or where.elf.identity is None:
        return None
    if where.mapping not in seen:
        seen[where.mapping] = None
        for candidate in reversed(proc.file_candidates(where.mapping)):
            if '"' in candidate or "\n" in candidate:
                continue  # cannot be written as a request
            try:
                if file_identity(candidate) == where.elf.identity:
                    seen[where.mapping] = candidate
                    break
            except OSError:
                continue
    return seen[where.mapping]


def _ask(places: list[_Place]) -> list[list[tuple] | None]:
    """llvm-symbolizer's answer for each place (None: not asked or no answer), from the cache
    where it has one, one batch for the rest."""
    keys = [(p.where.elf.identity, p.where.vaddr) if p.path else None for p in places]
    answers = [_answers.get(key) if key else None for key in keys]
    missing = {keys[i]: places[i].path for i, answer in enumerate(answers) if keys[i] and answer is None}
    tool = llvm_symbolizer() if missing else None
    if tool is None:
        return answers
    requests = [(path, identity, vaddr) for (identity, vaddr), path in missing.items()]
    for key, answer in zip(missing, tool.symbolize(requests)):
        if answer is not None:
            _answers[key] = answer
            while len(_answers) > _ANSWERS_MAX:
                _answers.popitem(last=False)
    return [_answers.get(key) if key else None for key in keys]


def _frames(where: Location, answer: list[tuple] | None) -> list[SourceFrame]:
    module = where.module or ""
    if answer:
        last = len(answer) - 1
        return [SourceFrame(function, file, line, i < last, module) for i, (function, file, line) in enumerate(answer)]
    hit = where.elf.resolve_vaddr(where.vaddr) if where.vaddr is not None else None
    return [SourceFrame(hit[0] if hit else UNKNOWN, None, None, False, module)]

"""BCC's C dialect -> CO-RE C for ebpfkit's engine, on libclang's syntax tree.

What BCC's compiler does inside clang, done here as edits to the source text at the
extents libclang gives:

- ``BPF_TABLE("lru_hash", ...)`` -> ``BPF_TABLE(lru_hash, ...)`` (the kind picks a macro);
  the table macros themselves (ek_bcc.h) declare BTF-defined maps.
- A method call on a table, ``counts.increment(key)``, -> ``__ek_increment(counts, key)``
  (a macro over the map helpers). Parsed with ``EK_BCC_PARSE``, each table struct has a
  function-pointer member per method, so the call is typed and its arguments are known.
- Probes declared by name get their section: ``kprobe__vfs_read`` -> ``SEC("kprobe/vfs_read")``,
  ``tracepoint__sched__sched_switch``, ``raw_tracepoint__...``; a kprobe's arguments after
  ``ctx`` are read from the registers. Other global functions are programs attached from
  Python (``attach_*(fn_name=...)``): a placeholder section, their type set at load.
- ``TRACEPOINT_PROBE``'s ``args`` struct comes from the tracepoint's tracefs format.
- Reads through kernel pointers (``task->real_parent->tgid``), which BCC turns into
  bpf_probe_read() calls, become ``BPF_CORE_READ(task, real_parent, tgid)``; an address
  (``&task->comm``, an array member) is computed with CO-RE offsets and no read.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass, field

from ..errors import CompileError, NotSupportedError
from . import tracepoints

INCLUDE_DIR = os.path.join(os.path.dirname(__file__), "include")
# unsaved (in-memory) files, in a directory that need not exist
VIRTUAL_DIR = "/ebpfkit-bcc"
MAIN_FILE, PROGRAM_FILE = f"{VIRTUAL_DIR}/main.c", f"{VIRTUAL_DIR}/bcc_program.c"
VERSION = 22  # of the translation: part of the cache key

_HEADERS = """\
#include "ek_kconfig.h"
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ek_bcc.h"
"""
# the context structs of program types: direct access, never a probe read
_CONTEXT_STRUCTS = frozenset({
    "pt_regs", "__sk_buff", "xdp_md", "bpf_sock_ops", "sk_msg_md", "bpf_perf_event_data", "sk_reuseport_md",
    "bpf_sock_addr", "bpf_sockopt", "bpf_sysctl", "bpf_raw_tracepoint_args", "bpf_sock", "bpf_sk_lookup"})
# name prefix -> (section kind, how the rest names the target)
_PREFIXES = (("kretprobe__", "kretprobe"), ("kprobe__", "kprobe"), ("tracepoint__", "tracepoint"),
             ("raw_tracepoint__", "raw_tracepoint"), ("kfunc__", "fentry"), ("kretfunc__", "fexit"),
             ("lsm__", "lsm"))
# program kinds whose context is typed (BTF): they read kernel memory directly
_BTF_KINDS = frozenset({"fentry", "fexit", "lsm"})
# macros that declare a probe with its section (ek_bcc.h)
_PROBE_MACROS = ("TRACEPOINT_PROBE", "RAW_TRACEPOINT_PROBE", "KFUNC_PROBE", "KRETFUNC_PROBE", "LSM_PROBE")
PLACEHOLDER_SECTION = "kprobe"  # a function attached from Python: its real type is set at load


@dataclass
class Probe:
    """A function of the program: how it attaches by itself (kind, target), or kind None
    when Python attaches it (``attach_*(fn_name=...)``)."""
    name: str
    kind: str | None = None
    target: str | None = None


@dataclass
class Translation:
    source: str                                   # CO-RE C for the engine
    probes: dict[str, Probe] = field(default_factory=dict)
    events: dict[str, str] = field(default_factory=dict)  # output table -> the C type it submits
    key: str = ""                                 # what the translation depends on, hashed
    stubs: list[str] = field(default_factory=list)  # kernel headers it includes that are empty here


# the kernel headers BCC's programs include: every type is in vmlinux.h, so each becomes an
# empty file (its constants are in ek_bcc.h), unless include/ has one with content; the
# system's UAPI headers of the same names would redefine vmlinux.h's types
_KERNEL_HEADER_DIRS = ("linux/", "net/", "uapi/", "asm/", "trace/", "bcc/", "scsi/", "xen/")


@functools.lru_cache(maxsize=1)
def kconfig_dir() -> str:
    """A directory holding ek_kconfig.h: this kernel's CONFIG_* options and LINUX_VERSION_CODE,
    as its headers' autoconf.h and version.h define them for BCC's programs: opensnoop reads a
    syscall wrapper's pt_regs under CONFIG_ARCH_HAS_SYSCALL_WRAPPER, ttysnoop picks tty_write's
    arguments by LINUX_VERSION_CODE."""
    from ..engine import cache
    from ..sysinfo.kconfig import as_c_defines, config_path, kernel_config, version_code

    text = (f"/* ebpfkit.bcc: the kernel's configuration ({config_path() or 'not found'}) and version */\n"
            f"#pragma once\n#define LINUX_VERSION_CODE {version_code()}\n" + as_c_defines(kernel_config()))
    root = cache.subdir(os.path.join("bcc", "kconfig", cache.digest(text)[:20]))
    path = os.path.join(root, "ek_kconfig.h")
    if not os.path.exists(path):
        cache.atomic_write(path, text.encode())
    return root


def stub_dir(stubs) -> str:
    """A directory holding an empty header for each of ``stubs`` (made when missing)."""
    from ..engine import cache

    root = cache.subdir(os.path.join("bcc", "stubs"))
    for name in stubs:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            cache.atomic_write(path, f"/* ebpfkit.bcc: <{name}>: its types are in vmlinux.h */\n#pragma once\n".encode())
    return root


def _included(index, text: str) -> list[str]:
    """The kernel headers the program includes that include/ does not provide."""
    toks = [t.spelling for t in _tokens(index, text)]
    names = []
    for i, tok in enumerate(toks):
        if tok == "include" and i and toks[i - 1] == "#" and toks[i + 1:i + 2] == ["<"]:
            end = toks.index(">", i + 2) if ">" in toks[i + 2:] else i + 2
            names.append("".join(toks[i + 2:end]))
    return [n for n in dict.fromkeys(names) if n.startswith(_KERNEL_HEADER_DIRS) and ".." not in n
            and not os.path.exists(os.path.join(INCLUDE_DIR, n))]


def translate(text: str, vmlinux_h: str, name: str = "bcc_program", cflags=(), tracing_root=None,
              usdt: bool = False) -> Translation:
    """Translate BCC C ``text``; raises CompileError naming the program's own lines. ``usdt``:
    some of its functions run at USDT probes (libbpf's <bpf/usdt.bpf.h> reads their arguments)."""
    from clang import cindex

    headers = _HEADERS + ("#include <bpf/usdt.bpf.h>\n" if usdt else "")
    index = cindex.Index.create()
    text = _rewrite_table_kinds(index, text)
    tp_structs = "".join(tracepoints.args_struct(g, e, tracing_root) for g, e in _tracepoints_named(index, text))
    main = f"#define EK_BCC_PARSE 1\n{headers}{tp_structs}#include \"{os.path.basename(PROGRAM_FILE)}\"\n"
    stubs = _included(index, text)
    args = ["-x", "c", "-target", "bpf", "-D__TARGET_ARCH_x86", "-D__BPF_TRACING__", "-Wno-unused-value",
            f"-I{os.path.dirname(vmlinux_h)}", f"-I{INCLUDE_DIR}", f"-I{stub_dir(stubs)}", f"-I{kconfig_dir()}",
            *cflags]

    def parse(text):
        return index.parse(MAIN_FILE, args=args, unsaved_files=[(MAIN_FILE, main), (PROGRAM_FILE, text)],
                           options=cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)

    tu = parse(text)
    copies = _kernel_struct_copies(index, tu, text)
    if copies:  # the program's own copies of kernel structs: vmlinux.h has them, complete
        text = _apply(text, copies)
        tu = parse(text)
    errors = [d for d in tu.diagnostics if d.severity >= cindex.Diagnostic.Error]
    if errors:
        raise _compile_error(name, errors)
    walker = _Walker(tu, text)
    walker.walk()
    body = _apply(text, walker.edits)
    for table, event in walker.events.items():  # in the object's BTF, for Python to decode events
        body += f"\n{event} *__ek_event_{table} __attribute__((unused));"
    if not walker.licensed:  # BCC's default
        body += '\nchar _license[] SEC("license") = "GPL";\n'
    body += _LITERAL_PADDING
    source = f"{headers}{tp_structs}#line 1 \"{name}.c\"\n{body}"
    key = hashlib.sha256(f"{VERSION}\0{source}".encode()).hexdigest()[:16]
    return Translation(source, walker.probes, walker.events, key, stubs)


# --- before the parse: tokens --------------------------------------------------------------

def _tokens(index, text: str):
    from clang import cindex

    tu = index.parse(PROGRAM_FILE, args=["-x", "c"], unsaved_files=[(PROGRAM_FILE, text)],
                     options=cindex.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES | 0x200)  # 0x200: single file
    return list(tu.get_tokens(extent=tu.cursor.extent))


def _rewrite_table_kinds(index, text: str) -> str:
    """``BPF_TABLE("hash", ...)`` -> ``BPF_TABLE(hash, ...)``: a macro cannot switch on a string."""
    toks = _tokens(index, text)
    edits = []
    for a, b, c in zip(toks, toks[1:], toks[2:]):
        if a.spelling == "BPF_TABLE" and b.spelling == "(" and c.spelling.startswith('"'):
            edits.append((c.extent.start.offset, c.extent.end.offset, c.spelling.strip('"')))
    return _apply(text, edits)


def _tracepoints_named(index, text: str) -> list[tuple[str, str]]:
    """(group, event) of each TRACEPOINT_PROBE(group, event) and tracepoint__group__event."""
    toks = [t.spelling for t in _tokens(index, text)]
    found = []
    for i, tok in enumerate(toks):
        if tok == "TRACEPOINT_PROBE" and toks[i + 1:i + 2] == ["("] and len(toks) > i + 5:
            found.append((toks[i + 2], toks[i + 4]))
        elif tok.startswith("tracepoint__") and tok.count("__") >= 2:  # a function's name, or its args struct
            group, _, event = tok[len("tracepoint__"):].partition("__")
            found.append((group, event))
    return list(dict.fromkeys(found))


def _kernel_struct_copies(index, tu, text: str) -> list[tuple[int, int, str]]:
    """Edits that remove the program's definitions of structs the kernel's BTF already has
    (BCC's tools copy kernel-internal structs their headers do not export: nameidata,
    mnt_namespace); CO-RE reads the kernel's own layout. Found from the parser's
    "redefinition" errors (the invalid copy has no cursor): ``struct NAME { ... };`` by tokens."""
    at = {d.location.offset for d in tu.diagnostics
          if d.spelling.startswith("redefinition of '") and d.location.file is not None
          and d.location.file.name == PROGRAM_FILE}
    if not at:
        return []
    toks = _tokens(index, text)
    edits = []
    for i, tok in enumerate(toks):
        if tok.extent.start.offset not in at or i == 0 or toks[i - 1].spelling not in ("struct", "union"):
            continue
        depth, j = 0, i + 1
        while j < len(toks):
            depth += {"{": 1, "}": -1}.get(toks[j].spelling, 0)
            if depth == 0 and toks[j].spelling == ";":
                edits.append((toks[i - 1].extent.start.offset, toks[j].extent.end.offset, ""))
                break
            j += 1
    return edits


# --- the walk -------------------------------------------------------------------------------

class _Walker:
    def __init__(self, tu, text: str):
        self.tu, self.text = tu, text
        self.edits: list[tuple[int, int, str]] = []
        self.probes: dict[str, Probe] = {}
        self.events: dict[str, str] = {}
        self.called: set[str] = set()
        self.direct: set[int] = set()  # variables (cursor hashes) pointing at map values or the stack

    def walk(self) -> None:
        from clang.cindex import CursorKind as K

        functions = [c for c in self.tu.cursor.get_children()
                     if c.kind == K.FUNCTION_DECL and c.is_definition() and self._ours(c)]
        for fn in functions:
            self._find_direct(fn)
        for fn in functions:
            self._visit(fn, [], btf=False)
        for fn in functions:
            self._visit_calls(fn)
        for fn in functions:
            self._function(fn)
        self.licensed = any(c.kind == K.VAR_DECL and c.spelling == "_license" and self._ours(c)
                            for c in self.tu.cursor.get_children())

    def _ours(self, cursor) -> bool:
        loc = cursor.location
        return loc.file is not None and loc.file.name == PROGRAM_FILE

    # functions ------------------------------------------------------------------------

    def _visit_calls(self, fn) -> None:
        from clang.cindex import CursorKind as K

        for c in fn.walk_preorder():
            if c.kind == K.CALL_EXPR and c.referenced is not None and c.referenced.kind == K.FUNCTION_DECL:
                self.called.add(c.referenced.spelling)

    def _function(self, fn) -> None:
        from clang.cindex import StorageClass

        name = fn.spelling
        start = fn.extent.start.offset
        declared_by_macro = self.text.startswith(_PROBE_MACROS, start)
        # BPF_PROG's own prototype names its function in a typeof(name(0)): not a call
        if fn.storage_class == StorageClass.STATIC or (name in self.called and not declared_by_macro):
            # a helper the programs call: inlined, as BCC inlines every function of a program
            # (a BPF-to-BPF call in a loop can take 6.1's verifier past its 1M instructions)
            self.edits.append((start, start, "__attribute__((always_inline)) "))
            return
        kind, target = _named_probe(name)
        self.probes[name] = Probe(name, kind, target)
        if declared_by_macro:
            return
        section = f"{kind}/{target}" if kind else PLACEHOLDER_SECTION
        self.edits.append((start, start, f'SEC("{section}") '))
        if kind in (None, "kprobe", "kretprobe"):
            self._register_arguments(fn)

    def _register_arguments(self, fn) -> None:
        """``int kprobe__f(struct pt_regs *ctx, int fd, ...)``: the arguments after ctx are
        read from ctx's registers at the top of the body, as BCC does; a ``syscall__``
        function's from the registers the syscall wrapper was given (x86's __x64_sys_*
        take a pt_regs of the user's registers)."""
        from clang.cindex import CursorKind as K

        params = [c for c in fn.get_children() if c.kind == K.PARM_DECL]
        if len(params) < 2 or "pt_regs" not in params[0].type.spelling:
            return
        body = next((c for c in fn.get_children() if c.kind == K.COMPOUND_STMT), None)
        if body is None:
            return
        first_end = params[0].extent.end.offset
        last_end = params[-1].extent.end.offset
        self.edits.append((first_end, last_end, ""))
        ctx = params[0].spelling
        syscall = fn.spelling.startswith("syscall__")
        lines = [f" struct pt_regs *__ek_regs = PT_REGS_SYSCALL_REGS({ctx});"] if syscall else []
        for n, p in enumerate(params[1:], start=1):
            if n > 6:  # what the calling convention passes in registers
                raise NotSupportedError("kprobe arguments", f"{fn.spelling}: more than 6 arguments after ctx")
            reg = f"PT_REGS_PARM{n}_CORE_SYSCALL(__ek_regs)" if syscall else f"PT_REGS_PARM{n}({ctx})"
            lines.append(f" {p.type.spelling} {p.spelling} = ({p.type.spelling}){reg};")
        brace = body.extent.start.offset + 1
        self.edits.append((brace, brace, "".join(lines)))

    # expressions ----------------------------------------------------------------------

    def _visit(self, cursor, parents: list, btf: bool) -> None:
        from clang.cindex import CursorKind as K

        if cursor.kind == K.FUNCTION_DECL:
            btf = _named_probe(cursor.spelling)[0] in _BTF_KINDS
        if cursor.kind == K.CALL_EXPR:
            self._method_call(cursor)  # its arguments are visited below, as any expression's
        elif cursor.kind == K.MEMBER_REF_EXPR and not btf and not self._in_chain(parents):
            if self._kernel_read(cursor, parents):
                return  # the chain's inner members are part of this edit
        elif cursor.kind == K.ARRAY_SUBSCRIPT_EXPR and not btf and self._kernel_element(cursor, parents):
            return
        elif cursor.kind == K.UNARY_OPERATOR and not btf:
            self._kernel_deref(cursor, parents)  # its operand is visited below, as any expression's
        parents.append(cursor)
        for child in cursor.get_children():
            self._visit(child, parents, btf)
        parents.pop()

    def _method_call(self, call) -> bool:
        """``table.method(args)`` -> ``__ek_method(table, args)``."""
        from clang.cindex import CursorKind as K

        callee = next(call.get_children(), None)
        callee = _strip(callee)
        if callee is None or callee.kind != K.MEMBER_REF_EXPR:
            return False
        base = _strip(next(callee.get_children(), None))
        if base is None or base.kind != K.DECL_REF_EXPR or not _is_table(base.referenced):
            return False
        table, method = base.spelling, callee.spelling
        tokens = list(call.get_tokens())
        paren = next((t for t in tokens if t.spelling == "(" and t.extent.start.offset >= callee.extent.end.offset), None)
        if paren is None or callee.extent.start.file is None or callee.extent.start.file.name != PROGRAM_FILE:
            return False  # inside a macro of the program's own: left to the compiler to reject
        args = list(call.get_arguments())
        self.edits.append((callee.extent.start.offset, paren.extent.end.offset,
                           f"__ek_{method}({table}{', ' if args else ''}"))
        if method in ("perf_submit", "ringbuf_output", "ringbuf_submit") and args:
            data = _strip(args[1] if method == "perf_submit" else args[0])  # past the cast to void *
            pointee = data.type.get_canonical().get_pointee()
            if pointee.spelling and pointee.spelling != "void":
                self.events.setdefault(table, pointee.spelling)
        if method == "ringbuf_reserve":
            self._reserved_type(call, table)
        return True

    def _reserved_type(self, call, table: str) -> None:
        """``struct data_t *d = events.ringbuf_reserve(sizeof(*d))``: the event type is what
        the result is assigned to."""
        from clang.cindex import TypeKind

        t = call.type.get_canonical()
        if t.kind == TypeKind.POINTER and t.get_pointee().spelling not in ("void", ""):
            self.events.setdefault(table, t.get_pointee().spelling)

    def _in_chain(self, parents) -> bool:
        from clang.cindex import CursorKind as K

        for p in reversed(parents):
            if p.kind == K.MEMBER_REF_EXPR:
                return True
            if p.kind not in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
                return False
        return False

    def _kernel_read(self, top, parents) -> bool:
        """Rewrite the member chain ending at ``top`` when it goes through a kernel pointer."""
        from clang.cindex import CursorKind as K

        links = []  # (member name, through an arrow?, the base's cursor), outermost first
        node = top
        while node is not None and node.kind == K.MEMBER_REF_EXPR:
            base = _strip(next(node.get_children(), None))
            if base is None:
                return False
            links.append((node.spelling, self._is_arrow(node, base), base))
            node = base
        links.reverse()
        # an anonymous struct or union's implicit step (skb->transport_header goes through one):
        # not written in C; its arrow, and the pointer it goes through, pass to the next member
        merged = []
        for i, (name, arrow, base) in enumerate(links):
            if name and "(anonymous" not in name:
                merged.append((name, arrow, base))
            elif i + 1 < len(links) and arrow:
                links[i + 1] = (links[i + 1][0], True, base)
        links = merged
        if node is None or not self._ours(node) or node.extent.start.file is None:
            return False
        arrows = [i for i, (_, arrow, base) in enumerate(links)
                  if arrow and _kernel_pointer(base.type) and not self._direct(base)]
        if not arrows or self._unevaluated(parents) or self._assigned(top, parents):
            return False
        first = arrows[0]
        src = self.text[node.extent.start.offset:links[first][2].extent.end.offset]
        # accessors: each arrow starts one, a dot continues it ("f_path.dentry")
        accessors: list[str] = []
        for name, arrow, _ in links[first:]:
            if arrow or not accessors:
                accessors.append(name)
            else:
                accessors[-1] += "." + name
        taken = self._address_taken(parents)
        array = top.type.get_canonical().kind.name in ("CONSTANTARRAY", "INCOMPLETEARRAY")
        # the kernel's structs are read with CO-RE offsets; a program's own copy of one (a
        # prefix of it, as BCC's tools declare) has no type in the kernel to relocate against
        core = _kernel_struct(links[first][2].type)
        read = "BPF_CORE_READ" if core else "BPF_PROBE_READ"
        # a base reached through the program's own memory (valp->fp, a map value's member) is
        # read first, plainly: inside the relocated address it would be relocated too, against
        # a struct the kernel does not have
        hoisted = not re.fullmatch(r"\s*\w+\s*", src)
        base = "__ek_base" if hoisted else src
        if taken or array:  # an address: no read of the last member
            # the struct holding the last member is read first, into a local: clang refuses a
            # CO-RE read nested in the relocated address of another
            owner = f"{read}({base}, {', '.join(accessors[:-1])})" if len(accessors) > 1 else f"({base})"
            address = f"&__ek_owner->{accessors[-1]}"
            if core:
                address = f"__builtin_preserve_access_index({address})"
            if not taken:  # as the array would decay: a pointer to its first element
                address = f"(typeof(&__ek_owner->{accessors[-1]}[0])){address}"
            new = f"({{ {_hoist(src) if hoisted else ''}__auto_type __ek_owner = {owner}; {address}; }})"
            if taken:  # the program's own & stays in front: give it an lvalue
                new = f"(*{new})"
        else:
            new = f"{read}({base}, {', '.join(accessors)})"
            if hoisted:
                new = f"({{ {_hoist(src)}{new}; }})"
        self.edits.append((node.extent.start.offset, top.extent.end.offset, new))
        return True

    def _kernel_element(self, expr, parents) -> bool:
        """``((u8 *)tcp)[13]`` where ``tcp`` points into the kernel, or ``sgs[i]`` where ``sgs``
        points at kernel pointers (virtiostat's ``struct scatterlist **``, handed down from the
        probed function to a helper of the program's): a probe read of the element. (Read
        rvalues only: a probe read of the program's own memory reads it just as well.)"""
        from clang.cindex import CursorKind as K

        kids = list(expr.get_children())
        if len(kids) != 2 or self._unevaluated(parents) or self._assigned(expr, parents) or \
                self._address_taken(parents):
            return False
        base = _strip_casts(kids[0])
        if base is None or base.kind != K.DECL_REF_EXPR or self._direct(base) or \
                not (_kernel_pointer(base.type) or _kernel_pointer(_pointee(base.type))):
            return False
        if expr.extent.start.file is None or expr.extent.start.file.name != PROGRAM_FILE:
            return False
        text = self.text[expr.extent.start.offset:expr.extent.end.offset]
        self.edits.append((expr.extent.start.offset, expr.extent.end.offset,
                           f"({{ typeof({text}) __ek_e; bpf_probe_read_kernel(&__ek_e, sizeof(__ek_e), &{text}); "
                           f"__ek_e; }})"))
        return True

    def _kernel_deref(self, expr, parents) -> bool:
        """``*ppos`` where ``ppos`` is a probed function's argument (ext4slower's ``loff_t *``),
        or ``*(&sk->rcv_tos - 2)``, a pointer computed from a kernel struct's member address
        (bindsnoop reads bitfields so): a probe read of what it points at."""
        if _first_token(expr) != "*" or self._unevaluated(parents) or self._assigned(expr, parents) or \
                self._address_taken(parents) or not self._ours(expr):
            return False
        operand = next(expr.get_children(), None)
        if operand is None or not (_probed_argument(_strip_casts(operand)) or
                                   any(self._kernel_member_address(c) for c in operand.walk_preorder())):
            return False
        star = next(expr.get_tokens())
        self.edits.append((star.extent.start.offset, star.extent.end.offset, "__EK_DEREF("))
        self.edits.append((expr.extent.end.offset, expr.extent.end.offset, ")"))
        return True

    def _kernel_member_address(self, cursor) -> bool:
        """``&p->member`` where ``p`` points into the kernel."""
        from clang.cindex import CursorKind as K

        if cursor.kind != K.UNARY_OPERATOR or _first_token(cursor) != "&":
            return False
        member = _strip(next(cursor.get_children(), None))
        if member is None or member.kind != K.MEMBER_REF_EXPR:
            return False
        base = _strip_casts(next(member.get_children(), None))
        while base is not None and base.kind == K.MEMBER_REF_EXPR:  # &sk->__sk_common.skc_bound_dev_if
            base = _strip_casts(next(base.get_children(), None))
        return base is not None and base.kind == K.DECL_REF_EXPR and not self._direct(base) and \
            _kernel_pointer(base.type)

    def _is_arrow(self, member, base) -> bool:
        for tok in member.get_tokens():
            if tok.extent.start.offset >= base.extent.end.offset:
                return tok.spelling == "->"
        return False

    def _unevaluated(self, parents) -> bool:
        from clang.cindex import CursorKind as K

        for p in parents:
            if p.kind == K.CXX_UNARY_EXPR or (p.kind == K.UNARY_OPERATOR and _first_token(p) in ("sizeof", "__alignof__")):
                return True
            if p.kind == K.UNEXPOSED_EXPR and _first_token(p) in ("sizeof", "typeof", "__typeof__"):
                return True
        return False

    def _address_taken(self, parents) -> bool:
        from clang.cindex import CursorKind as K

        for p in reversed(parents):
            if p.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
                continue
            return p.kind == K.UNARY_OPERATOR and _first_token(p) == "&"
        return False

    def _direct(self, base) -> bool:
        """A variable the program points at memory it may touch directly: a map value (from
        a lookup or a ring-buffer reservation) or its own stack (``&local``)."""
        from clang.cindex import CursorKind as K

        return base.kind == K.DECL_REF_EXPR and base.referenced is not None and \
            base.referenced.hash in self.direct

    def _find_direct(self, fn) -> None:
        from clang.cindex import CursorKind as K

        for c in fn.walk_preorder():
            if c.kind == K.VAR_DECL:
                kids = list(c.get_children())
                if kids and _direct_source(kids[-1]):
                    self.direct.add(c.hash)
            elif c.kind == K.BINARY_OPERATOR:
                kids = list(c.get_children())
                lhs = _strip(kids[0]) if kids else None
                if len(kids) == 2 and lhs is not None and lhs.kind == K.DECL_REF_EXPR and \
                        lhs.referenced is not None and _direct_source(kids[1]):
                    self.direct.add(lhs.referenced.hash)

    def _assigned(self, top, parents) -> bool:
        """``task->x = ...``, ``v->n++``: a write (the verifier's to refuse), not a read."""
        from clang.cindex import CursorKind as K

        for p in reversed(parents):
            if p.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
                continue
            if p.kind == K.UNARY_OPERATOR and any(t.spelling in ("++", "--") for t in p.get_tokens()):
                return True
            if p.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
                lhs = next(p.get_children(), None)
                return lhs is not None and lhs.extent.start.offset == top.extent.start.offset and \
                    any(t.spelling.endswith("=") and t.spelling not in ("==", "!=", "<=", ">=")
                        for t in p.get_tokens() if t.extent.start.offset >= top.extent.end.offset)
            return False
        return False


_DIRECT_CALLS = frozenset({"bpf_map_lookup_elem", "bpf_ringbuf_reserve", "bpf_map_lookup_percpu_elem",
                           "lookup", "lookup_or_init", "lookup_or_try_init", "ringbuf_reserve"})


def _direct_source(expr) -> bool:
    """An expression (past casts) that yields memory a program may access directly: a map
    lookup (a helper, or a table method) or the address of a variable of its own."""
    from clang.cindex import CursorKind as K

    expr = _strip_casts(expr)
    if expr is None:
        return False
    if expr.kind == K.CALL_EXPR:
        callee = _strip(next(expr.get_children(), None))
        return callee is not None and callee.spelling in _DIRECT_CALLS
    if expr.kind == K.UNARY_OPERATOR:  # &local, &local.field, &local[i]: not &ptr->field
        tokens = [t.spelling for t in expr.get_tokens()]
        return tokens[:1] == ["&"] and "->" not in tokens
    return False


def _strip_casts(cursor):
    """Past casts, written or implicit, and parentheses (a cast's operand is its last child)."""
    from clang.cindex import CursorKind as K

    while cursor is not None and cursor.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR, K.CSTYLE_CAST_EXPR):
        children = list(cursor.get_children())
        cursor = children[-1] if children else None
    return cursor


def _strip(cursor):
    """Past implicit casts and parentheses."""
    from clang.cindex import CursorKind as K

    while cursor is not None and cursor.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
        cursor = next(cursor.get_children(), None)
    return cursor


def _first_token(cursor) -> str:
    tok = next(cursor.get_tokens(), None)
    return tok.spelling if tok is not None else ""


def _is_table(decl) -> bool:
    """A variable declared by one of ek_bcc.h's table macros (its struct has method members)."""
    from clang.cindex import CursorKind as K

    if decl is None or decl.kind != K.VAR_DECL:
        return False
    struct = decl.type.get_canonical().get_declaration()
    names = {c.spelling for c in struct.get_children() if c.kind == K.FIELD_DECL}
    return bool(names & {"lookup", "perf_submit", "ringbuf_output", "get_stackid"})


def _kernel_pointer(t) -> bool:
    """``t`` (None: no type) is a pointer to a struct or union that may be kernel memory: the
    kernel's own (vmlinux.h) or the program's partial copy of one (BCC's tools declare such),
    not a program context and not a tracepoint's args (the context too)."""
    from clang.cindex import TypeKind

    if t is None:
        return False
    t = t.get_canonical()
    if t.kind != TypeKind.POINTER:
        return False
    pointee = t.get_pointee().get_canonical()
    if pointee.kind != TypeKind.RECORD:
        return False
    decl = pointee.get_declaration()
    loc = decl.location
    if loc.file is None or loc.file.name == MAIN_FILE or decl.spelling.startswith("tracepoint__"):
        return False
    return decl.spelling not in _CONTEXT_STRUCTS


def _pointee(t):
    """What pointer type ``t`` points at (None if it is no pointer)."""
    from clang.cindex import TypeKind

    t = t.get_canonical()
    return t.get_pointee() if t.kind == TypeKind.POINTER else None


def _probed_argument(expr) -> bool:
    """A probed function's pointer argument (a parameter after a kprobe's or uprobe's ctx):
    memory of the kernel or of the probed process, never the program's own."""
    from clang.cindex import CursorKind as K, TypeKind

    if expr is None or expr.kind != K.DECL_REF_EXPR or expr.referenced is None or \
            expr.referenced.kind != K.PARM_DECL:
        return False
    fn = expr.referenced.semantic_parent
    params = [c for c in fn.get_children() if c.kind == K.PARM_DECL] if fn is not None else []
    if not params or "pt_regs" not in params[0].type.spelling or params[0] == expr.referenced:
        return False  # a helper's parameter may point at the program's own stack or a map value
    t = expr.type.get_canonical()
    if t.kind != TypeKind.POINTER:
        return False
    pointee = t.get_pointee().get_canonical()
    if pointee.kind == TypeKind.RECORD:
        name = pointee.get_declaration().spelling
        return name not in _CONTEXT_STRUCTS and not name.startswith("tracepoint__")
    return pointee.kind != TypeKind.VOID


def _kernel_struct(t) -> bool:
    """A pointer to a struct the kernel's BTF has (declared in vmlinux.h)."""
    loc = t.get_canonical().get_pointee().get_canonical().get_declaration().location
    return loc.file is not None and loc.file.name.endswith("vmlinux.h")


# BCC's tools copy fixed-size buffers out of string literals (ext4dist: 16 bytes from "fsync"):
# past the last literal that reads beyond the literals' map, which the verifier refuses. A
# function nothing calls, last in the file, puts 64 bytes of literal after all of them.
_LITERAL_PADDING = ('\n__attribute__((used)) static int __ek_literal_padding(void)\n{ return *(volatile const char *)'
                    f'"{"." * 64}"; }}\n')


def _hoist(src: str) -> str:
    """A declaration of ``__ek_base``: the chain's base, read before its CO-RE read."""
    return f"__auto_type __ek_base = ({src}); "


def _named_probe(name: str) -> tuple[str | None, str | None]:
    for prefix, kind in _PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            rest = name[len(prefix):]
            if kind == "tracepoint":
                group, _, event = rest.partition("__")
                return (kind, f"{group}/{event}") if event else (None, None)
            return kind, rest
    return None, None


def _apply(text: str, edits) -> str:
    """Apply (start, end, replacement) edits; insertions at one offset keep their order."""
    out, at = [], 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < at:
            raise CompileError(f"BCC translation: overlapping edits at offset {start}")
        out.append(text[at:start])
        out.append(new)
        at = end
    out.append(text[at:])
    return "".join(out)


def _compile_error(name: str, errors) -> CompileError:
    diagnostics, lines = [], []
    for d in errors[:20]:
        loc = d.location
        file = loc.file.name if loc.file else "?"
        if file == PROGRAM_FILE:
            file = f"{name}.c"
        diagnostics.append((file, loc.line, loc.column, "error", d.spelling, ""))
        lines.append(f"{file}:{loc.line}:{loc.column}: error: {d.spelling}")
    missing = sorted({m for d in errors for m in re.findall(r"incomplete definition of type '(struct \w+)'", d.spelling)})
    if missing:  # nfsslower's nfs_commit_data: a module's type
        lines.append(f"({', '.join(missing)}: not in the kernel's own BTF (vmlinux); a module's type, whose BTF "
                     "ebpfkit.bcc does not read)")
    return CompileError("the BCC program does not compile:\n" + "\n".join(lines), diagnostics)

"""The ``args`` struct of a BCC tracepoint probe (``TRACEPOINT_PROBE(sched, sched_switch)``,
``int tracepoint__sched__sched_switch(struct tracepoint__sched__sched_switch *args)``), made
from the tracepoint's tracefs format as BCC makes it: each field at its offset, integers
sized as the record has them (a syscall's ``int dfd`` is 8 bytes there), ``__data_loc``
fields as ``int data_loc_<name>``."""

from __future__ import annotations

import re

from ..errors import NotSupportedError
from ..sysinfo.events import TracepointField, tracepoint_fields

# "const char * filename", "char comm[16]", "__data_loc char[] name", "unsigned long args[6]"
_DECLARATION = re.compile(r"^(?P<type>.*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<array>\[\d*\])?$")


def struct_name(group: str, event: str) -> str:
    return f"tracepoint__{group}__{event}"


def args_struct(group: str, event: str, tracing_root: str | None = None) -> str:
    """C for ``struct tracepoint__<group>__<event>``, with a compile-time check of each offset.
    tracefs is mounted first where it is not (boot mounts none on some systems)."""
    if tracing_root is None:
        from ..engine.mounts import ensure_tracefs

        tracing_root = ensure_tracefs()
    try:
        fields = tracepoint_fields(group, event, tracing_root)
    except OSError:
        raise NotSupportedError(f"tracepoint {group}:{event}",
                                f"this kernel has no tracepoint {group}:{event} (no tracefs format for it)") from None
    name = struct_name(group, event)
    lines, checks, end = [f"struct {name} {{"], [], 0
    for field in fields:
        member = _member(field)
        if field.offset > end:
            lines.append(f"\tchar __pad_{end}[{field.offset - end}];")
        lines.append(f"\t{member[0]};")
        checks.append(f"_Static_assert(__builtin_offsetof(struct {name}, {member[1]}) == {field.offset}, "
                      f"\"{group}:{event} {member[1]}\");")
        end = field.offset + field.size
    lines.append("};")
    return "\n".join(lines + checks) + "\n"


def _member(field: TracepointField) -> tuple[str, str]:
    """(the member's declaration, its name)."""
    text = " ".join(field.declaration.split())
    if text.startswith("__data_loc "):
        m = _DECLARATION.match(text[len("__data_loc "):].replace("[]", "").strip())
        name = f"data_loc_{m['name']}"
        return f"int {name}", name
    m = _DECLARATION.match(text)
    if m is None:
        raise NotSupportedError("tracepoint field", f"cannot read the declaration '{field.declaration}'")
    type_, name, array = m["type"].strip(), m["name"], m["array"]
    if array:
        count = array[1:-1] or "0"
        return f"{type_} {name}[{count}]", name
    scalar = "*" not in type_ and not type_.startswith(("struct ", "union "))
    if scalar and field.size in (1, 2, 4, 8):
        type_ = f"__{'s' if field.signed else 'u'}{field.size * 8}"
    return f"{type_} {name}", name

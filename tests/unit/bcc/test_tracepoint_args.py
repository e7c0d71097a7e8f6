"""The args struct of a BCC tracepoint probe, made from a tracefs format file (a fake tree):
each field at its offset, integers sized as the record has them, __data_loc as BCC names it,
and a clear error for a tracepoint the kernel lacks."""

from __future__ import annotations

import pytest

from ebpfkit.bcc.tracepoints import args_struct
from ebpfkit.errors import NotSupportedError

FORMAT = """name: sys_enter_demo
ID: 1
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:int dfd;\toffset:16;\tsize:8;\tsigned:0;
\tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;
\tfield:__data_loc char[] name;\toffset:32;\tsize:4;\tsigned:0;
\tfield:char comm[16];\toffset:36;\tsize:16;\tsigned:0;

print fmt: "dfd: 0x%08lx", ((unsigned long)(REC->dfd))
"""


def test_fields_sit_at_their_offsets_with_the_records_sizes(tmp_path):
    event = tmp_path / "events" / "demo" / "sys_enter_demo"
    event.mkdir(parents=True)
    (event / "format").write_text(FORMAT)
    text = args_struct("demo", "sys_enter_demo", str(tmp_path))
    body = text[text.index("{") + 1:text.index("};")].split(";")
    members = [" ".join(m.split()) for m in body if m.strip()]
    assert members == ["__u16 common_type", "__u8 common_flags", "__u8 common_preempt_count", "__s32 common_pid",
                       "__s32 __syscall_nr", "char __pad_12[4]", "__u64 dfd", "const char * filename",
                       "int data_loc_name", "char comm[16]"]
    assert text.startswith("struct tracepoint__demo__sys_enter_demo {")
    assert "_Static_assert(__builtin_offsetof(struct tracepoint__demo__sys_enter_demo, comm) == 36" in text


def test_a_tracepoint_the_kernel_lacks_is_named(tmp_path):
    with pytest.raises(NotSupportedError) as exc:
        args_struct("demo", "missing", str(tmp_path))
    assert "this kernel has no tracepoint demo:missing" in str(exc.value)

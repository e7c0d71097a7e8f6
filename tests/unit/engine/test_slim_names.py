"""What the slim header is chosen from: a program's identifiers, read from its text and the
headers it includes, without a preprocessor."""

from __future__ import annotations

from ebpfkit.engine.compiler import _include_dirs
from ebpfkit.engine.slimheader import program_names


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_names_come_from_the_program_and_every_header_it_includes(tmp_path):
    program = write(tmp_path / "prog" / "a.bpf.c", '#include "vmlinux.h"\n#include "../inc/vmlinux.h"\n'
                                                    '#include "local.h"\n'
                                                    "#include <lib/shared.h>\n#include <stddef.h>\n"
                                                    "int f(struct in_program *p);\n")
    write(tmp_path / "prog" / "local.h", '#include "local.h"\n#define M(x) ((struct in_macro *)x)\n')
    write(tmp_path / "inc" / "lib" / "shared.h", '#include "near_shared.h"\n#if 0\nstruct in_dead_code;\n#endif\n')
    write(tmp_path / "inc" / "lib" / "near_shared.h", "typedef int beside_the_includer;\n")
    write(tmp_path / "inc" / "vmlinux.h", "struct never_read;\n")
    names = program_names(str(program), [str(tmp_path / "inc")])
    assert {b"in_program", b"in_macro", b"in_dead_code", b"beside_the_includer"} <= names.spelled
    assert b"never_read" not in names.spelled  # vmlinux.h is what is being written
    assert not {b"include", b"lib", b"shared", b"h", b"stddef"} & names.spelled  # #include lines
    assert not names.declared


def test_comments_and_literals_do_not_count(tmp_path):
    program = write(tmp_path / "a.bpf.c", '// line_comment\n/* block\n   comment */ int x;\n'
                                          'char *s = "in_string /* not a comment";\n'
                                          "char c = '\"'; int after_quote_char;\n"
                                          'SEC("kprobe/in_section") int y; /* a */ int between; /* b */\n')
    spelled = program_names(str(program), []).spelled
    assert {b"x", b"s", b"c", b"after_quote_char", b"SEC", b"y", b"between"} <= spelled
    assert not {b"line_comment", b"block", b"comment", b"in_string", b"in_section", b"a", b"b"} & spelled


def test_names_only_the_helper_prototypes_spell_are_declared_only(tmp_path):
    program = write(tmp_path / "a.bpf.c", "#include <bpf/bpf_helper_defs.h>\nstruct both *p;\n")
    write(tmp_path / "inc" / "bpf" / "bpf_helper_defs.h",
          "struct only_helpers;\nstruct both;\nstatic long (*h)(struct only_helpers *a, struct both *b, __u64 f);\n")
    names = program_names(str(program), [str(tmp_path / "inc")])
    assert {b"only_helpers", b"__u64", b"h"} <= names.declared
    assert b"both" in names.spelled and b"both" not in names.declared


def test_include_dirs_are_read_from_the_command_line_in_search_order():
    flags = ["-O2", "-idirafter/last", "-I/first", "-isystem", "/system", "-I", "/second", "-include", "x.h"]
    assert _include_dirs(flags) == ["/first", "/second", "/system", "/last"]

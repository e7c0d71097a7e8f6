"""`ebpfkit bcc run SCRIPT [ARGS...]`: an unmodified BCC script, its ``import bcc`` resolved
to ebpfkit.bcc; a bare tool name is looked up where BCC's packages install their tools."""

from __future__ import annotations

import os
import re
import shutil

import click

EXAMPLES = """\b
Examples:
  ebpfkit bcc run exitsnoop            BCC's exitsnoop (Debian: /usr/sbin/exitsnoop-bpfcc)
  ebpfkit bcc run syscount -p 1234     its options after the name, as BCC's tool takes them
  ebpfkit bcc run ./mytool.py -i 5     a script of your own that does `from bcc import BPF`
  ebpfkit bcc run --engine bcc execsnoop   BCC itself (where this kernel's headers are installed)
"""
# where Debian's bpfcc-tools, and BCC built from source, put the tools
TOOL_PLACES = ("/usr/sbin/{}-bpfcc", "/usr/share/bcc/tools/{}")


@click.group(epilog=EXAMPLES)
def bcc():
    """Run BCC programs and tools on ebpfkit: their C is translated to CO-RE C and compiled
    against this kernel's BTF, so no kernel headers are needed."""


@bcc.command(epilog=EXAMPLES, context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True,
                                                "help_option_names": []})
@click.option("--engine", type=click.Choice(["ebpfkit", "bcc"]), default="ebpfkit", show_default=True,
              help="bcc: BCC itself runs the script (its module and this kernel's headers needed), to compare")
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(engine, script, args):
    """Run SCRIPT (a path, or the name of a BCC tool) with ARGS, as BCC would."""
    import sys

    from ...bcc import install_as_bcc, native
    from ...output import line_buffered_stdout

    path = find_script(script)
    with open(path, "rb") as f:
        first = f.readline()
    if first.startswith(b"#!") and b"python" not in first:
        path, args = unwrap(path, first, args)
    (native.install_as_bcc if engine == "bcc" else install_as_bcc)()
    sys.argv = [path, *args]
    line_buffered_stdout()  # a tool's lines reach `| grep` (or a test reading its header) as printed
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        source = with_tracefs_here(f.read())
    try:
        code = compile(source, path, "exec")
    except (SyntaxError, ValueError) as exc:  # not Python (a binary, /etc/passwd): a usage error
        where = f"{path}:{exc.lineno}" if getattr(exc, "lineno", None) else path
        raise click.UsageError(f"{where}: not a Python program ({getattr(exc, 'msg', exc)}): "
                               f"`bcc run` takes a BCC Python script or a BCC tool's name") from None
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as `python3 SCRIPT` would
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})


# BCC's tools of its 0.2x releases name tracefs by its old place under debugfs (tplist reads
# its events there), which kernels since 4.1 also mount, and many systems only, at /sys/kernel/tracing
OLD_TRACEFS = "/sys/kernel/debug/tracing"


def with_tracefs_here(source: str) -> str:
    """The script's source, naming tracefs where this system has it."""
    from ...engine.mounts import ensure_tracefs

    if OLD_TRACEFS not in source or os.path.isdir(os.path.join(OLD_TRACEFS, "events")):
        return source
    return source.replace(OLD_TRACEFS, ensure_tracefs())


# BCC's language tools are shell wrappers of one Python tool: javacalls is `$lib/ucalls -l java "$@"`
WRAPPER_LINE = re.compile(r'^\$lib/([\w.-]+)((?:\s+[\w.-]+)*)\s+"\$@"\s*$', re.M)


def unwrap(path: str, first: bytes, args: tuple) -> tuple[str, tuple]:
    """The Python tool a BCC shell wrapper starts, and its arguments then."""
    with open(path, encoding="utf-8", errors="replace") as f:
        found = WRAPPER_LINE.search(f.read())
    tool = found and os.path.join(os.path.dirname(path), found.group(1))
    if not tool or not os.path.isfile(tool):
        raise click.UsageError(f"{path} is not a Python script ({first.decode(errors='replace').strip()}), nor a "
                               "wrapper of one as BCC's language tools are: `ebpfkit bcc run` runs BCC's Python tools")
    return tool, (*found.group(2).split(), *args)


def find_script(name: str) -> str:
    """``name`` if it is a file, else the installed BCC tool of that name."""
    if os.path.isfile(name):
        return name
    if os.sep not in name:
        for place in TOOL_PLACES:
            path = place.format(name)
            if os.path.isfile(path):
                return path
        found = shutil.which(f"{name}-bpfcc")
        if found:
            return found
    looked = ", ".join(p.format(name) for p in TOOL_PLACES)
    raise click.UsageError(f"no BCC script '{name}': not a file, and no tool of that name in {looked} "
                           "(Debian: apt-get install bpfcc-tools)")

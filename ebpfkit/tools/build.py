"""build: compile every program shipped with ebpfkit into prebuilt CO-RE objects."""

from __future__ import annotations

from pathlib import Path

import click

from ..output import Output, tool_options

EXAMPLES = """\b
Examples:
  ebpfkit build                      into the package (used when clang is missing)
  ebpfkit build --out-dir /tmp/objs  somewhere else, e.g. to copy to a clang-less host
"""


@click.command(epilog=EXAMPLES)
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the objects (default: ebpfkit/programs/prebuilt).")
@tool_options
def build(out_dir):
    """Compile every BPF program into CO-RE objects that load on any BTF kernel without clang."""
    from ..engine.compiler import PREBUILT_DIR
    from ..engine.prebuilt import build_all
    from ..output import ResultTable

    out = Output.from_context()
    target = out_dir or PREBUILT_DIR
    built = build_all(target, progress=lambda name: out.info("compiling %s", name))
    out.table(ResultTable(["object", "bytes"], [(str(p), p.stat().st_size) for p in built],
                          title=f"{len(built)} CO-RE objects in {target}"))

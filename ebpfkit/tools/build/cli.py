"""`ebpfkit build`: options -> Config, what the session built -> the output layer."""

from __future__ import annotations

from pathlib import Path

import click

from ...output import Output, tool_options
from ..common import build_config, usage_errors

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
    from ...output import Column, ResultTable
    from .session import Config, build as build_objects

    out = Output.from_context()
    config = build_config(Config, out_dir=None if out_dir is None else str(out_dir))
    with usage_errors():  # the default directory, made only now
        result = build_objects(config, progress=lambda name: out.info("compiling %s", name))
    # the table names each object in the title's directory; JSON and CSV carry the whole path
    rows = [{"name": o.path.name, "object": str(o.path), "bytes": o.bytes,
             "written": "yes" if o.written else "no (current)"} for o in result.objects]
    out.banner(f"{len(result.objects)} CO-RE objects in {result.out_dir} ({result.written} written)")
    out.table(ResultTable([Column("object", key="name"), Column("bytes"), Column("written")], rows,
                          title="CO-RE objects", data_keys=["object", "bytes", "written"]))

"""build: compile every program shipped with ebpfkit into prebuilt CO-RE objects."""

from __future__ import annotations

from pathlib import Path

import click

from ...output import Output, tool_options

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
    from ...engine.compiler import PREBUILT_DIR
    from ...engine.prebuilt import build_all
    from ...output import Column, ResultTable

    out = Output.from_context()
    target = out_dir or Path(PREBUILT_DIR)
    _make_dir(target)
    built = build_all(target, progress=lambda name: out.info("compiling %s", name))
    written = sum(b.written for b in built)
    # the table names each object in the title's directory; JSON and CSV carry the whole path
    rows = [{"name": b.path.name, "object": str(b.path), "bytes": b.path.stat().st_size,
             "written": "yes" if b.written else "no (current)"} for b in built]
    out.banner(f"{len(built)} CO-RE objects in {target} ({written} written)")
    out.table(ResultTable([Column("object", key="name"), Column("bytes"), Column("written")], rows,
                          title="CO-RE objects", data_keys=["object", "bytes", "written"]))


def _make_dir(path: Path) -> None:
    """Create the output directory first: a path that cannot be one is the caller's mistake (exit 2)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"cannot create directory {path}: {exc.strerror}",
                                 param_hint="'--out-dir'") from None

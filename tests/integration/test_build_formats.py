"""`ebpfkit build` reports the objects it wrote, in every format and in its --log file, as
they are on disk: one per shipped program, with its size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ebpfkit.engine.prebuilt import program_sources
from outputs import csv_tables, logged, table_sections

pytestmark = pytest.mark.integration

PROGRAMS = program_sources()


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_build_reports_the_objects_it_wrote(tmp_path, fmt):
    out_dir, log = tmp_path / "objs", tmp_path / "build.log"
    result = subprocess.run([sys.executable, "-m", "ebpfkit", "--no-color", "--format", fmt, "--log", str(log),
                             "build", "--out-dir", str(out_dir)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    on_disk = {str(out_dir / f"{src.name[:-2]}.o"): (out_dir / f"{src.name[:-2]}.o").stat().st_size
               for src in PROGRAMS}
    assert on_disk and sorted(p.name for p in out_dir.iterdir()) == sorted(Path(p).name for p in on_disk)
    if fmt == "json":
        printed = {r["object"]: r["bytes"] for r in json.loads(result.stdout)["rows"]}
    elif fmt == "csv":
        (rows,) = csv_tables(result.stdout)
        printed = {r["object"]: int(r["bytes"]) for r in rows}
    else:
        assert f"{len(on_disk)} CO-RE objects in {out_dir} ({len(on_disk)} written)" in result.stderr
        title = "CO-RE objects"
        printed = {str(out_dir / cells[0]): int(cells[1]) for cells in table_sections(result.stdout, [title])[title]}
    assert printed == on_disk
    (kept,) = logged(log, "build")
    assert {r["object"]: r["bytes"] for r in kept["rows"]} == on_disk

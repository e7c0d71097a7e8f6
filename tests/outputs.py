"""Reading a tool's output back in the tests: CSV holding several tables, and the records a
--log file keeps (a tool's records are the JSON lines carrying its name in "tool")."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path


def csv_tables(text: str) -> list[list[dict]]:
    """CSV of several tables: each under its header line (the lines starting "time")."""
    tables: list[list[dict]] = []
    header: list[str] = []
    for row in csv.reader(io.StringIO(text)):
        if row[0] == "time":
            header = row
            tables.append([])
        else:
            tables[-1].append(dict(zip(header, row)))
    return tables


def logged(path: Path, tool: str) -> list[dict]:
    """``tool``'s records in the --log file ``path`` (every line must be JSON), without
    their "tool" key."""
    records = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("tool") == tool:
            del record["tool"]
            records.append(record)
    return records


def table_sections(text: str, titles: list[str]) -> dict[str, list[list[str]]]:
    """The rows of each table titled one of ``titles`` in table-format output, as lists of
    cells (split at spaces; the header line under the title skipped)."""
    sections: dict[str, list[list[str]]] = {}
    rows = None
    for line in text.splitlines():
        if line.strip() in titles:
            rows = sections.setdefault(line.strip(), [])
            header = True
        elif not line.strip():
            rows = None
        elif rows is not None:
            if not header:
                rows.append(line.split())
            header = False
    return sections

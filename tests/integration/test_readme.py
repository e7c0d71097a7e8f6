"""The README's notebook example runs as written and prints what its comments promise."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs_and_counts_three_opens():
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    match = re.search(r"\[\(Struct\(pid=(\d+), comm='([^']*)'\), (\d+)\)\]", out.stdout)
    assert match, out.stdout
    assert int(match.group(3)) == 3
    assert match.group(2).startswith("python")

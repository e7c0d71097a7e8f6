import sys

import pytest

from ebpfkit.errors import NotSupportedError
from ebpfkit.output import MAX_TABLE_WIDTH, Column, Output, OutputSettings, ResultTable

LONG_PATH = "/usr/lib/python3/dist-packages/" + "very_long_directory_name/" * 8 + "module.so"


def files_table():
    table = ResultTable(["PID", Column("COMM", key="comm"), Column("FILE", key="path"),
                         Column("READS", key="reads"), Column("KBYTES", key="kb", format=".1f")],
                        title="top files")
    table.add_row([1234, "python3", LONG_PATH, 12, 1.25])
    table.add_row({"PID": 42, "comm": b"bash\0\0\0", "path": "/etc/passwd", "reads": 123456789,
                   "kb": 12345.678})
    table.add_row(PID=7, comm="a command name that is rather long for a column", path=None,
                  reads=0, kb=0.0)
    return table


def render(console, renderable):
    console.print(renderable)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 100, 160, 300])
def test_table_fits_in_100_columns(make_console, width):
    text = render(make_console(width), files_table())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= min(width, MAX_TABLE_WIDTH)
    # Numbers are never cut; the long path is ellipsized instead.
    assert "123456789" in text and "12345.7" in text and "1234" in text
    assert "…" in text and LONG_PATH not in text


def test_a_wide_table_asks_for_its_width_on_files_and_pipes(make_console):
    """A side-by-side table wider than 100 columns keeps its width when the output is a file
    or a pipe (no terminal to fit); ordinary tables still stop at 100."""
    wide = ResultTable([Column(f"COLUMN{i}", key=str(i)) for i in range(12)],
                       [{str(i): f"value-{i:02d}" for i in range(12)}], width=160)
    console = make_console(100)
    Output(OutputSettings(), console=console).table(wide)
    Output(OutputSettings(), console=console).table(files_table())
    wide_text, _, narrow_text = console.file.getvalue().partition("top files")
    assert "value-11" in wide_text and "…" not in wide_text
    assert 100 < max(map(len, wide_text.splitlines())) <= 160
    assert max(map(len, narrow_text.splitlines())) <= MAX_TABLE_WIDTH


def test_table_content(make_console):
    text = render(make_console(100), files_table())
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[0].strip() == "top files"
    assert lines[1].split() == ["PID", "COMM", "FILE", "READS", "KBYTES"]
    assert lines[2].split()[0] == "1234" and lines[2].split()[-2:] == ["12", "1.2"]
    row = lines[3].split()
    assert row[:3] == ["42", "bash", "/etc/passwd"]  # C string: NULs dropped
    assert lines[4].split()[-3:] == ["-", "0", "0.0"]  # missing value shown as "-"
    # Numeric columns are right-aligned: their last digits line up.
    assert lines[2].index("12 ") + 2 == lines[3].index("123456789") + 9


def test_result_table_conversions():
    table = files_table()
    dicts = table.to_dicts()
    assert dicts[1] == {"PID": 42, "comm": "bash", "path": "/etc/passwd", "reads": 123456789,
                        "kb": 12345.678}
    assert list(dicts[0]) == table.keys == ["PID", "comm", "path", "reads", "kb"]
    frame = table.to_dataframe()
    assert list(frame.columns) == table.keys and frame["reads"].tolist() == [12, 123456789, 0]
    assert len(table) == 3 and repr(table) == "ResultTable(columns=['PID', 'comm', 'path', 'reads', 'kb'], rows=3)"


def test_result_table_row_length_is_checked():
    with pytest.raises(ValueError):
        ResultTable(["A", "B"], [[1]])


def test_to_dataframe_without_pandas(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(NotSupportedError, match="pandas"):
        files_table().to_dataframe()


def test_str_and_notebook_display():
    table = files_table()
    assert str(table).splitlines()[1].split() == ["PID", "COMM", "FILE", "READS", "KBYTES"]
    bundle = table._repr_mimebundle_()
    assert bundle["text/plain"] == str(table)
    assert "<pre" in bundle["text/html"] and "KBYTES" in bundle["text/html"]


def test_output_table_through_an_injected_console(make_console):
    console = make_console(120)
    out = Output(OutputSettings(), console=console)
    out.table([{"pid": 1, "comm": "init"}, {"pid": 2, "comm": "kthreadd"}])
    lines = console.file.getvalue().splitlines()
    assert [line.split() for line in lines] == [["pid", "comm"], ["1", "init"], ["2", "kthreadd"]]


def test_markup_in_values_is_not_interpreted(make_console):
    console = make_console()
    Output(OutputSettings(), console=console).table([{"comm": "[bold]x[/bold]"}], title="[red]t")
    text = console.file.getvalue()
    assert "[bold]x[/bold]" in text and "[red]t" in text

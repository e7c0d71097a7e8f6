"""The root command: lazy subcommands, global options, help and version."""

import subprocess
import sys

from click.testing import CliRunner

from ebpfkit import __version__
from ebpfkit.cli import cli
from ebpfkit.tools import TOOLS


def test_help_lists_every_registered_tool_with_examples():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    flat = " ".join(result.output.split())  # click wraps long summaries
    for name, info in TOOLS.items():
        assert name in result.output
        assert " ".join(info.summary.split()) in flat
    assert "Examples:" in result.output


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_every_tool_has_help_with_examples():
    for name in TOOLS:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert "Examples:" in result.output, name


def test_importing_the_cli_loads_no_tool_engine_or_rich():
    code = ("import sys, ebpfkit.cli; "
            "bad = [m for m in sys.modules if m.startswith(('ebpfkit.tools.', 'ebpfkit.engine', 'rich'))"
            " and m != 'ebpfkit.tools.__init__']; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["no-such-tool"])
    assert result.exit_code == 2
    assert "No such command" in result.output


def test_bad_interval_is_a_usage_error_not_a_traceback():
    result = CliRunner().invoke(cli, ["runqlat", "-1"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output

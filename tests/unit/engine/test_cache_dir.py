"""Where compiled objects go, and what a user is told when that place cannot be made."""

import os

import pytest

from ebpfkit.cli import cli
from ebpfkit.engine import cache
from ebpfkit.errors import EbpfkitError
from ebpfkit.output.errors import invoke_cli


def test_the_environment_chooses_the_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "c"))
    assert cache.subdir("objects") == str(tmp_path / "c" / "objects")
    assert os.path.isdir(tmp_path / "c" / "objects")


def test_a_directory_that_cannot_be_made_is_named_with_the_way_out(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(EbpfkitError) as exc:
        cache.cache_dir()
    assert str(blocker / "cache") in str(exc.value) and "EBPFKIT_CACHE_DIR" in exc.value.hint


def test_a_tool_says_it_without_a_traceback(tmp_path, monkeypatch, capsys):
    """As `nobody` with HOME=/nonexistent: a message naming the directory, exit 1."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(blocker / "cache"))
    assert invoke_cli(cli, ["build", "--out-dir", str(tmp_path / "objs")]) == 1
    err = capsys.readouterr().err
    assert f"cannot create the cache directory {blocker / 'cache'}" in err
    assert "EBPFKIT_CACHE_DIR" in err and "Traceback" not in err

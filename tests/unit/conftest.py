"""Shared fixtures for the output-layer tests: a tiny click CLI built on ebpfkit.output,
a captured rich console, and clean logging state between tests."""

from __future__ import annotations

import io
import logging

import click
import pytest
from click.testing import CliRunner

from ebpfkit.output import settings as output_settings


@pytest.fixture(autouse=True)
def _reset_output_state():
    yield
    for name in ("ebpfkit", "ebpfkit.events"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if getattr(handler, "ebpfkit_owned", False):
                logger.removeHandler(handler)
                handler.close()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    output_settings._active = None


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def make_console():
    """A rich Console writing to a StringIO; read it with ``console.file.getvalue()``."""
    from rich.console import Console

    def make(width: int = 100) -> Console:
        return Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)

    return make


@pytest.fixture
def make_cli():
    """Build the tiny test CLI: a root group with global_options, and one tool command whose
    body is ``body(out, **params)``."""
    from ebpfkit.output import Output, global_options, tool_options

    def make(body, *extra_params: click.Parameter) -> click.Group:
        @click.group()
        @global_options
        def cli():
            """Test root."""

        @cli.command()
        @tool_options
        def tool(**params):
            body(Output.from_context(), **params)

        tool.params.extend(extra_params)
        return cli

    return make

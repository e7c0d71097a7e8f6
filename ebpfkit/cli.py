"""The `ebpfkit` command: a click group whose subcommands are imported only when run."""

from __future__ import annotations

import importlib
import os
import signal

import click

from ._version import __version__
from .output import global_options, run_cli
from .tools import TOOLS

EPILOG = """\b
Examples:
  ebpfkit doctor                  what this kernel allows, tool by tool
  ebpfkit runqlat 1 5             run-queue latency, five 1-second histograms
  ebpfkit --format json runqlat 1 1
  ebpfkit -v doctor --format json
Run `ebpfkit COMMAND --help` for a command's options and examples.
"""


class LazyGroup(click.Group):
    """Lists tools from the registry; imports a tool's module only when it is invoked."""

    def list_commands(self, ctx):
        return sorted(TOOLS)

    def get_command(self, ctx, name):
        info = TOOLS.get(name)
        if info is None:
            return None
        return getattr(importlib.import_module(info.module), name)

    def format_commands(self, ctx, formatter):
        rows = [(name, TOOLS[name].summary) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ebpfkit")
@click.option("--btf", type=click.Path(), metavar="FILE",
              help="This kernel's BTF from a file (BTFHub's <release>.btf, a vmlinux with .BTF, or a debug "
                   "package's vmlinux with DWARF, which pahole encodes once) for "
                   "kernels that expose none; same as EBPFKIT_BTF. Serves CO-RE compiles and relocation; "
                   "tp_btf/fentry/fexit/LSM hooks still need the kernel's own BTF.")
@global_options
def cli(btf):
    """ebpfkit: eBPF diagnostics, networking and security tools on a CO-RE runtime engine.

    Programs are compiled at run time against this kernel's BTF (cached), loaded
    through libbpf, and detached when a tool ends.
    """
    from .engine.btf import BTF_ENV, usable_btf_file

    if btf:
        os.environ[BTF_ENV] = os.path.abspath(btf)  # the engine reads it where it needs BTF
    if os.environ.get(BTF_ENV):
        # a bad file is a usage error before any tool runs; a DWARF vmlinux becomes BTF here, once
        os.environ[BTF_ENV] = usable_btf_file(os.environ[BTF_ENV])


def _sigterm_as_ctrl_c(signum, frame):
    """A command-line tool stops on SIGTERM (kill, systemd, a container's stop) as on Ctrl-C:
    its final output printed, its links detached, the same exit status. Where SIGINT is
    ignored (inherited so, in a script's background job), SIGTERM still stops it."""
    if os.getpid() != _main_pid:
        # a fork() child (pyroute2's netns helpers) inherits this handler but must not unwind
        # the tool's stack: it dies as SIGTERM normally would
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)  # the interval loop's own rules (common.intervals)
    else:
        raise KeyboardInterrupt


_main_pid = os.getpid()


def main():
    global _main_pid
    _main_pid = os.getpid()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    run_cli(cli, prog_name="ebpfkit")


if __name__ == "__main__":
    main()

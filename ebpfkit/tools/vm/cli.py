"""vm: boot another kernel (virtme-ng over a read-only view of this machine) and run a
command inside as root; list the kernels it can boot."""

from __future__ import annotations

import click

from ...errors import EbpfkitError
from ...output import Column, Output, ResultTable, forward_output, tool_options

EXAMPLES = """\b
Examples:
  ebpfkit vm kernels                          kernels installed in /boot
  ebpfkit vm run -- uname -r                  the default (newest) kernel
  ebpfkit vm run --lsm -- cat /sys/kernel/security/lsm
  ebpfkit vm run --kernel 6.1 --timeout 300 -- python -m pytest tests/vm
  ebpfkit vm run --kernel /boot/vmlinuz-6.1.0-56-amd64 -- ebpfkit doctor
"""

RUN_EXAMPLES = """\b
Examples:
  ebpfkit vm run -- uname -r
  ebpfkit vm run --lsm --timeout 300 -- python -m pytest tests/vm
  ebpfkit vm run -e EBPFKIT_CLANG=clang-14 --console console.log -- ebpfkit doctor
  ebpfkit vm run --rwdir out -- python -m pytest --junitxml=out/junit.xml tests/integration
\b
The command's output is streamed and its exit status becomes this command's; stdin is not
forwarded. The guest sees this machine's files read-only (writes to /tmp, /var, /etc... stay
in the guest; --rwdir names directories whose writes reach this machine) and reuses this machine's ebpfkit compile cache.
\b
Exit status: the command's; 124 when --timeout killed the VM; 125 when the guest died
without one (kernel panic, a frozen guest, boot failure: the console's last lines are shown).
"""


class VMTimeoutError(EbpfkitError):
    exit_code = 124  # as timeout(1)


class VMFailedError(EbpfkitError):
    exit_code = 125  # the VM, not the command, failed (as `docker run`)


@click.group(epilog=EXAMPLES)
def vm():
    """Boot another kernel in a VM and run a command (or tests) inside."""


@vm.command(epilog=RUN_EXAMPLES, context_settings={"allow_interspersed_args": False})
@click.option("--kernel", metavar="PATH|VERSION",
              help="Kernel image, or an installed release or version prefix (default: the newest installed).")
@click.option("--lsm", is_flag=True, help="Make BPF-LSM active (lsm=...,bpf on the kernel command line).")
@click.option("--memory", default="2G", show_default=True, help="Guest memory.")
@click.option("--cpus", type=click.IntRange(min=1), help="Guest CPUs (default: virtme-ng's).")
@click.option("--timeout", type=click.FloatRange(min=1), metavar="S",
              help="Kill the VM after S seconds, boot included (default: no limit).")
@click.option("--accel", type=click.Choice(["auto", "kvm", "tcg"]), default="auto", show_default=True,
              help="KVM, or software emulation (TCG); auto uses KVM when it really works.")
@click.option("-e", "--env", "env", multiple=True, metavar="KEY=VALUE", help="Set a variable for the command.")
@click.option("--console", "console_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Save the guest kernel's console (warnings and worse) to FILE.")
@click.option("--rwdir", "rwdirs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, resolve_path=True),
              help="A directory of this machine the guest may write (same path inside; repeatable).")
@click.option("--scratch", metavar="SIZE",
              help="A fresh ext4 disk of SIZE (e.g. 1G, virtio-blk) as the command's TMPDIR: a real disk "
                   "under its temporary files (the guest's /tmp is an overlay on 9p).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx, kernel, lsm, memory, cpus, timeout, accel, env, console_file, rwdirs, scratch, command):
    """Run COMMAND as root inside a VM booted with another kernel; return its exit status."""
    from ...vm import VMSpec, kernels, run as run_vm

    out = Output.from_context()
    variables = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--env")
        variables[key] = value
    spec = VMSpec(kernels.resolve(kernel), lsm=lsm, memory=memory, cpus=cpus, timeout=timeout,
                  accel=accel, env=variables, rwdirs=tuple(rwdirs), scratch=scratch)
    result = run_vm(list(command), spec, on_output=forward_output)
    if console_file:
        with open(console_file, "w") as f:
            f.write(result.console)
    # the run's outcome is its result: the command's own output went to stdout/stderr as it came
    out.log_event({"kernel": result.kernel, "accel": result.accel, "status": result.status,
                   "exit_code": result.exit_code, "boot_seconds": result.boot_seconds,
                   "seconds": result.seconds, "command": list(command)})
    boot = f"{result.boot_seconds:.1f} s" if result.boot_seconds is not None else "-"
    out.info("%s (%s): boot-to-command %s, total %.1f s", result.kernel, result.accel, boot, result.seconds)
    if result.status == "timeout":
        raise VMTimeoutError(result.describe(), hint="raise --timeout (under TCG a boot takes ~20 s)")
    if result.status != "exited":
        raise VMFailedError(result.describe(), hint="see the guest console above (save it all with --console FILE)")
    ctx.exit(result.exit_code)


@vm.command()
@tool_options
def kernels():
    """List the kernels a VM can boot (installed /boot/vmlinuz-* images)."""
    from ...vm import host, kernels as kmod

    out = Output.from_context()
    found = kmod.find_kernels()
    default = kmod.default_kernel(found)
    rows = []
    for k in found:
        rows.append({"release": k.release, "default": "*" if k is default else "",
                     "modules": "yes" if k.modules else "no", "headers": "yes" if k.headers else "no",
                     "btf": _config_flag(k, "DEBUG_INFO_BTF"), "kprobes": _config_flag(k, "KPROBES"),
                     "bpf_lsm": _config_flag(k, "BPF_LSM"), "image": k.image})
    accel, why = host.choose_accel(image=default.image if default else None)
    out.table(ResultTable([Column("release"), Column("default"), Column("modules"), Column("headers"),
                           Column("btf"), Column("kprobes"), Column("bpf_lsm"), Column("image")],
                          rows, title=f"Kernels (VMs here use {accel}: {why})"))
    if not found:
        out.warn("no kernel in /boot: apt-get install linux-image-amd64 linux-headers-amd64")


def _config_flag(kernel, name: str) -> str:
    value = kernel.config_value(name)
    return "?" if kernel.config is None else ("yes" if value in ("y", "m") else "no")

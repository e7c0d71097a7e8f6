import errno

import click
import pytest

from ebpfkit.errors import (AttachError, CompileError, EbpfkitError, LoadError, MapError,
                            NotSupportedError, PermissionDeniedError, VerifierError)
from ebpfkit.output import describe_error, invoke_cli, run_cli
from ebpfkit.output.errors import DOCTOR_HINT, PRIVILEGE_HINT

VERIFIER_LOG = "0: R1=ctx() R10=fp0\n0: (61) r2 = *(u32 *)(r1 +0)\ninvalid bpf_context access"


def run(runner, make_cli, exc, *args):
    """Run the test CLI through invoke_cli (the CLI's main) with a tool that raises ``exc``."""
    def body(out, **_):
        raise exc

    with runner.isolation() as (stdout, stderr, _):
        code = invoke_cli(make_cli(body), [*args, "tool"], prog_name="ebpfkit")
    return code, stdout.getvalue().decode(), stderr.getvalue().decode()


@pytest.mark.parametrize("exc, code", [
    (PermissionDeniedError("loading BPF programs needs privileges"), 4),
    (NotSupportedError("ringbuf", "BPF ring buffers need Linux 5.8", hint="use --perf-buffer"), 3),
    (VerifierError("trace_open", "invalid bpf_context access", VERIFIER_LOG), 1),
    (CompileError("prog.bpf.c:12:5: error: use of undeclared identifier 'x'\n   12 |     x = 1;"), 1),
    (LoadError("cannot load object", hint="check dmesg"), 1),
    (AttachError("kprobe do_sys_open not found"), 1),
    (MapError("update on map 'counts' failed"), 1),
    (EbpfkitError("generic failure"), 1),
    (KeyboardInterrupt(), 130),
    (click.Abort(), 1),
    (PermissionError(errno.EACCES, "Permission denied", "/sys/kernel/tracing"), 4),
    (OSError(errno.EPERM, "Operation not permitted"), 4),
    (OSError(errno.ENOENT, "No such file or directory", "/x"), 1),
    (RuntimeError("kaboom"), 1),
    (click.UsageError("bad usage"), 2),
    (click.BadParameter("bad value"), 2),
    (click.ClickException("click failure"), 1),
])
def test_exit_codes(exc, code):
    assert describe_error(exc).code == code


def test_permission_denied(runner, make_cli):
    code, out, err = run(runner, make_cli, PermissionDeniedError("cannot load programs"))
    assert code == 4 and out == ""
    assert "Error: cannot load programs" in err and f"Hint: {PRIVILEGE_HINT}" in err


def test_permission_error_from_the_os(runner, make_cli):
    code, _, err = run(runner, make_cli, PermissionError(errno.EPERM, "Operation not permitted"))
    assert code == 4 and "Operation not permitted" in err and PRIVILEGE_HINT in err


def test_not_supported_shows_its_hint(runner, make_cli):
    code, _, err = run(runner, make_cli, NotSupportedError("btf", "kernel has no BTF",
                                                          hint="enable CONFIG_DEBUG_INFO_BTF"))
    assert code == 3 and "Error: kernel has no BTF" in err
    assert f"Hint: enable CONFIG_DEBUG_INFO_BTF; {DOCTOR_HINT}" in err


def test_not_supported_without_a_hint_points_at_doctor(runner, make_cli):
    code, _, err = run(runner, make_cli, NotSupportedError("ringbuf", "no ring buffers"))
    assert code == 3 and f"Hint: {DOCTOR_HINT}" in err


def test_verifier_error_log_only_when_verbose(runner, make_cli):
    exc = VerifierError("trace_open", "invalid bpf_context access", VERIFIER_LOG)
    code, _, err = run(runner, make_cli, exc)
    assert code == 1
    assert "the verifier rejected program 'trace_open': invalid bpf_context access" in err
    assert "R10=fp0" not in err and "-v" in err
    code, _, err = run(runner, make_cli, exc, "-v")
    assert code == 1 and VERIFIER_LOG in err
    assert err.rstrip().endswith("invalid bpf_context access")  # summary last, after the long log


def test_compile_error_shows_its_message(runner, make_cli):
    message = "prog.bpf.c:12:5: error: use of undeclared identifier 'x'\n   12 |     x = 1;\n      |     ^"
    code, _, err = run(runner, make_cli, CompileError(message, output=message))
    assert code == 1 and message in err and err.count("undeclared") == 1


def test_other_ebpfkit_errors_show_message_and_hint(runner, make_cli):
    code, _, err = run(runner, make_cli, AttachError("no such kprobe", hint="is the module loaded?"))
    assert code == 1 and "Error: no such kprobe" in err and "Hint: is the module loaded?" in err


def test_keyboard_interrupt_is_quiet(runner, make_cli):
    code, out, err = run(runner, make_cli, KeyboardInterrupt())
    assert code == 130 and out == "" and "Error" not in err and "Traceback" not in err


def test_unexpected_error_traceback_only_when_verbose(runner, make_cli):
    code, _, err = run(runner, make_cli, ValueError("bad thing"))
    assert code == 1
    assert "Error: unexpected error: ValueError: bad thing" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("Error")]) == 1
    code, _, err = run(runner, make_cli, ValueError("bad thing"), "-v")
    assert code == 1 and "Traceback (most recent call last)" in err and "raise exc" in err


def test_usage_error(runner, make_cli):
    with runner.isolation() as (stdout, stderr, _):
        code = invoke_cli(make_cli(lambda out, **_: None), ["tool", "--bogus"], prog_name="ebpfkit")
    err = stderr.getvalue().decode()
    assert code == 2
    assert "Usage: ebpfkit tool [OPTIONS]" in err and "Try 'ebpfkit tool --help'" in err
    assert "No such option" in err


def test_success_help_and_ctx_exit(runner, make_cli):
    with runner.isolation() as (stdout, _, _):
        assert invoke_cli(make_cli(lambda out, **_: out.event({"a": 1})), ["tool"]) == 0
        assert invoke_cli(make_cli(lambda out, **_: None), ["--help"]) == 0
        assert "--log-size" in stdout.getvalue().decode()

    def exits(out, **_):
        click.get_current_context().exit(5)

    with runner.isolation():
        assert invoke_cli(make_cli(exits), ["tool"]) == 5


def test_no_color_and_plain_messages(runner, make_cli):
    code, _, err = run(runner, make_cli, EbpfkitError("boom", hint="h"), "--no-color")
    assert code == 1 and "\x1b[" not in err


def test_failure_is_written_to_the_log_file(runner, make_cli, tmp_path):
    log = tmp_path / "run.log"
    code, _, err = run(runner, make_cli, ValueError("bad thing"), "--log", str(log))
    assert code == 1
    text = log.read_text()
    assert "unexpected error: ValueError: bad thing" in text and "Traceback" in text
    assert err.count("bad thing") == 1  # not printed twice on the console


def test_run_cli_exits_with_the_code(runner, make_cli):
    def body(out, **_):
        raise NotSupportedError("x", "nope")

    with runner.isolation(), pytest.raises(SystemExit) as info:
        run_cli(make_cli(body), ["tool"])
    assert info.value.code == 3

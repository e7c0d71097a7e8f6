"""ebpfkit's exceptions. Every foreseeable failure is one of these; the CLI turns them
into a message and an exit code (see ebpfkit.output.errors), a notebook shows str()."""

from __future__ import annotations


class EbpfkitError(Exception):
    """Base class. ``hint`` says what the user can do about it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class CompileError(EbpfkitError):
    """clang rejected a program; ``diagnostics`` lists (file, line, col, severity, message, source)."""

    def __init__(self, message: str, diagnostics=(), output: str = ""):
        super().__init__(message)
        self.diagnostics = list(diagnostics)
        self.output = output


class VerifierError(EbpfkitError):
    """The kernel's verifier rejected a program. str() is a short summary; ``log`` is complete."""

    def __init__(self, program: str, summary: str, log: str, errno: int = 0):
        super().__init__(f"the verifier rejected program '{program}': {summary}",
                         hint="run with -v to see the whole verifier log")
        self.program = program
        self.summary = summary
        self.log = log
        self.errno = errno


class LoadError(EbpfkitError):
    """Opening or loading an object failed for a reason other than the verifier."""


class BTFFileError(LoadError):
    """A BTF file the user named (--btf, EBPFKIT_BTF) is missing, not BTF, or of another
    kernel: a usage error."""

    exit_code = 2


class ConfigError(EbpfkitError):
    """A tool's configuration has a bad value: a usage error, the same from the CLI, a YAML
    file or a notebook. ``field`` names the setting (the CLI shows its option instead)."""

    exit_code = 2

    def __init__(self, field: str, message: str, hint: str | None = None):
        super().__init__(f"{field}: {message}", hint)
        self.field = field
        self.reason = message


class NotSupportedError(EbpfkitError):
    """This kernel, libbpf or machine lacks a feature ``feature``."""

    exit_code = 3

    def __init__(self, feature: str, message: str, hint: str | None = None):
        super().__init__(message, hint)
        self.feature = feature


class PermissionDeniedError(EbpfkitError):
    """Not enough privilege (root or CAP_BPF + CAP_PERFMON + CAP_NET_ADMIN)."""

    exit_code = 4


class AttachError(EbpfkitError):
    """A loaded program could not be attached to its hook."""


class MapError(EbpfkitError, KeyError):
    """A map operation failed (other than a missing key, which raises KeyError)."""

    __str__ = Exception.__str__  # KeyError would quote the message

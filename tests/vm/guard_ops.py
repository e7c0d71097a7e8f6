"""One attempt at each operation a guard policy can deny, on one path.

The VM guard tests import it to attempt each operation as the untrusted test process, and
run it as a script through a trusted subject (`python guard_ops.py OP PATH ...`, which
prints {op: "ok" | errno name} as JSON), so both sides attempt exactly the same thing."""

from __future__ import annotations

import errno
import json
import os
import sys


def _exec(path: str) -> int:
    """execve ``path`` in a child; its pid (the subject the guard sees), or OSError."""
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(path, [path])
        except OSError as exc:
            os._exit(100 + exc.errno)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code >= 100:
        raise OSError(code - 100, os.strerror(code - 100), path)
    if code != 0:
        raise RuntimeError(f"{path} ran and exited {code}")
    return pid


def _read(path: str) -> None:
    with open(path, "rb") as f:
        f.read()


def _write(path: str) -> None:
    with open(path, "r+b") as f:
        f.write(b"changed")


ATTEMPTS = {
    "write": _write,
    "unlink": os.unlink,
    "rename": lambda path: os.rename(path, path + ".moved"),
    "link": lambda path: os.link(path, path + ".link"),
    "setattr": lambda path: os.chmod(path, 0o600),
    "read": _read,
    "exec": _exec,
}


def attempt(op: str, path: str) -> int:
    """Do ``op`` on ``path``; the pid that did it (OSError when it was denied)."""
    pid = ATTEMPTS[op](str(path))
    return pid or os.getpid()


def main(argv: list[str]) -> int:
    results = {}
    for op, path in zip(argv[::2], argv[1::2]):
        try:
            attempt(op, path)
            results[op] = "ok"
        except OSError as exc:
            results[op] = errno.errorcode.get(exc.errno, str(exc.errno))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

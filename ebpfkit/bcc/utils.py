"""``bcc.utils`` for BCC's scripts: printing bytes, argument strings, CPU lists."""

from __future__ import annotations


def printb(s: bytes, file=None, nl: int = 1) -> None:
    """Write bytes as they are (BCC's scripts print comm and paths this way)."""
    data = s + (b"\n" if nl else b"")
    if file is None:
        from ..output import forward_output

        forward_output("stdout", data)
        return
    file.flush()
    file.buffer.write(data)
    file.buffer.flush()


class ArgString:
    """An argparse type that keeps the argument as bytes (``bytes(ArgString("x"))``)."""

    def __init__(self, s: str):
        self.s = s

    def __bytes__(self) -> bytes:
        return self.s.encode(errors="surrogateescape")

    def __str__(self) -> str:
        return self.s


def _read_cpu_range(path: str) -> list[int]:
    cpus = []
    with open(path) as f:
        for part in f.read().strip().split(","):
            low, _, high = part.partition("-")
            cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def get_online_cpus() -> list[int]:
    return _read_cpu_range("/sys/devices/system/cpu/online")


def get_possible_cpus() -> list[int]:
    return _read_cpu_range("/sys/devices/system/cpu/possible")


class StrcmpRewrite:
    """What BCC's trace and argdist do with ``STRCMP("literal", expr)`` in a user's filter:
    each becomes a call of a generated function that reads the string at ``expr`` (from user
    memory for user probes) and compares it with the literal."""

    @staticmethod
    def rewrite_expr(expr, bin_cmp, is_user, probe_user_list, streq_functions, probeid):
        out, at = [], 0
        while True:
            start = expr.find("STRCMP(", at)
            if start < 0:
                break
            literal_end, arg_end = _strcmp_arguments(expr, start + len("STRCMP("))
            literal = expr[start + len("STRCMP("):literal_end].strip()
            arg = expr[literal_end + 1:arg_end].strip()
            user = is_user or arg in (probe_user_list or ())
            name = f"streq_{probeid}"
            streq_functions += _streq_function(name, literal, bin_cmp, user)
            probeid += 1
            out.append(expr[at:start] + name + "(")
            at = start + len("STRCMP(")
        out.append(expr[at:])
        return {"expr": "".join(out), "streq_functions": streq_functions, "probeid": probeid}


def _strcmp_arguments(expr: str, at: int) -> tuple[int, int]:
    """(index of the comma after STRCMP's literal, index of its closing parenthesis)."""
    depth, quoted, comma = 0, False, -1
    for i in range(at, len(expr)):
        c = expr[i]
        if c == '"' and expr[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            if depth == 0:
                return comma, i
            depth -= 1
        elif not quoted and c == "," and depth == 0 and comma < 0:
            comma = i
    raise ValueError(f"unbalanced STRCMP( in {expr!r}")


def _streq_function(name: str, literal: str, bin_cmp: bool, user: bool) -> str:
    needle = "{" + literal.strip('"') + "}" if bin_cmp else literal
    read = "bpf_probe_read_user" if user else "bpf_probe_read_kernel"
    return f"""
static inline bool {name}(char const *unused, unsigned long addr) {{
    char needle[] = {needle};
    char seen[sizeof(needle)];
    {read}(&seen, sizeof(seen), (void *)addr);
    for (int i = 0; i < sizeof(needle) - 1; ++i)
        if (needle[i] != seen[i])
            return false;
    return true;
}}
"""

"""Parse human sizes such as ``10M`` for --log-size."""

from __future__ import annotations

import re

import click

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: a number with an optional binary suffix K, M, G or T
    (``512K``, ``10M``, ``1.5G``; a trailing ``B``/``iB`` is allowed). Raises click.BadParameter."""
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise click.BadParameter(
                f"{text!r} is not a size: use a number of bytes with an optional K, M, G or T "
                "suffix, e.g. 512K, 10M, 1G")
        number, unit = match.groups()
        size = int(float(number) * _UNITS[unit.upper()])
    if size <= 0:
        raise click.BadParameter(f"{text!r} is too small: the size must be at least 1 byte")
    return size


class SizeParamType(click.ParamType):
    """Click type for size options; errors name the option."""

    name = "size"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)


SIZE = SizeParamType()

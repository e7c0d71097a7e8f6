"""What every tool's Session shares: it is a context manager that ``close()``s (detaches and
unloads) at the end of a ``with``. Each tool's ``open(config)`` returns one."""

from __future__ import annotations


class ToolSession:
    """Base of a tool's ``Session``; the tool defines ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

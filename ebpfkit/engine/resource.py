"""The shape every engine object that holds kernel resources shares."""


class Resource:
    """A context manager whose ``close()`` (idempotent, defined by the subclass) frees what
    it holds; garbage collection closes it too, so a forgotten object leaks nothing."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass

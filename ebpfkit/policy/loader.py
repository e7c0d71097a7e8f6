"""YAML to node tree, and errors located by line."""

from __future__ import annotations

import yaml

from ..errors import EbpfkitError


class PolicyError(EbpfkitError, ValueError):
    """A policy that cannot be used; ``line`` is 1-based (None when unknown). Exit 2, as
    for any bad input."""

    exit_code = 2

    def __init__(self, message: str, line: int | None = None, source: str = "<policy>"):
        self.message, self.line, self.source = message, line, source
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")


def node_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def load_yaml(text: str, source: str = "<policy>") -> yaml.Node | None:
    """Compose (not construct) the document: nodes keep their positions. Any YAML error,
    including odd input the scanner chokes on, becomes a PolicyError."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise PolicyError(f"invalid YAML: {exc.problem or exc.context}", line, source) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise PolicyError(f"invalid YAML: {exc}", None, source) from None


def read_text(path: str, what: str = "the policy") -> str:
    """A policy or configuration file's text; PolicyError (exit 2) if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise PolicyError(f"cannot read {what}: {exc.strerror or exc}", None, path) from None
    except UnicodeDecodeError:
        raise PolicyError(f"cannot read {what}: not UTF-8 text", None, path) from None


def construct(node: yaml.Node):
    """The Python value of a composed node (what yaml.safe_load gives for it)."""
    return yaml.SafeLoader("").construct_object(node, deep=True)

"""Falco-style conditions: parsed once into a tree of checks, then matched against events.

The grammar is a subset of Falco's::

    expr    := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | primary
    primary := "(" expr ")" | check | MACRO
    check   := FIELD "exists"
             | FIELD OP VALUE            OP: = == != < <= > >= contains icontains
                                             startswith endswith glob
             | FIELD LISTOP "(" ITEMS ")"   LISTOP: in intersects pmatch
    ITEMS   := item ("," item)*          an item that names a list stands for its items

Values are bare words or quoted strings. A field the event does not have makes its check
false, whatever the operator (as in Falco). Errors are ConditionError with a column, which
the rules loader turns into a line of the file.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

COMPARE_OPS = ("=", "==", "!=", "<", "<=", ">", ">=", "contains", "icontains", "startswith", "endswith",
               "glob")
LIST_OPS = ("in", "intersects", "pmatch")
KEYWORDS = {"and", "or", "not", "exists", *COMPARE_OPS, *LIST_OPS}
FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+(\[[^\]\s]+\])?$")

_TOKEN = re.compile(r"""\s*(?:
    (?P<lparen>\() | (?P<rparen>\)) | (?P<comma>,)
  | (?P<op>==|!=|<=|>=|=|<|>)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<word>[^\s(),=!<>"']+)
  | (?P<bad>\S)
)""", re.X)


class ConditionError(ValueError):
    """A condition that does not parse; ``column`` is 1-based within the condition text."""

    def __init__(self, message: str, column: int | None = None):
        self.message, self.column = message, column
        super().__init__(message if column is None else f"{message} (column {column})")


@dataclass(frozen=True)
class FieldSpec:
    """What the rules may say of one field: its type ("str", "int" or "strs", a list of strings
    such as the ancestors' names) and whether it takes an index (``proc.aname[2]``)."""

    type: str = "str"
    indexed: bool = False
    doc: str = ""


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    column: int


def tokenize(text: str) -> list[_Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        kind = m.lastgroup
        if kind is None:  # trailing blanks
            break
        if kind == "bad":
            raise ConditionError(f"unexpected {m.group(kind)!r}", m.start(kind) + 1)
        if kind == "string":
            value = m.group(kind)[1:-1]
            value = re.sub(r"\\(.)", r"\1", value)
        else:
            value = m.group(kind)
        tokens.append(_Token(kind, value, m.start(kind) + 1))
    return tokens


# --- the tree -----------------------------------------------------------------------------

class Node:
    def match(self, event: Mapping) -> bool:
        raise NotImplementedError

    def fields(self) -> set[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class And(Node):
    children: tuple[Node, ...]

    def match(self, event):
        return all(c.match(event) for c in self.children)

    def fields(self):
        return set().union(*(c.fields() for c in self.children))


@dataclass(frozen=True)
class Or(Node):
    children: tuple[Node, ...]

    def match(self, event):
        return any(c.match(event) for c in self.children)

    def fields(self):
        return set().union(*(c.fields() for c in self.children))


@dataclass(frozen=True)
class Not(Node):
    child: Node

    def match(self, event):
        return not self.child.match(event)

    def fields(self):
        return self.child.fields()


@dataclass(frozen=True)
class Check(Node):
    field: str
    op: str
    value: object = None   # a scalar, or a tuple for in/intersects/pmatch

    def match(self, event):
        actual = event.get(self.field)
        if actual is None:
            return False
        return _OPERATORS[self.op](actual, self.value)

    def fields(self):
        return {self.field}


def _as_list(actual) -> list:
    return list(actual) if isinstance(actual, (list, tuple, set, frozenset)) else [actual]


def _pmatch(actual, prefixes) -> bool:
    path = str(actual)
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


_OPERATORS: dict[str, Callable[[object, object], bool]] = {
    "=": lambda a, v: a == v,
    "==": lambda a, v: a == v,
    "!=": lambda a, v: a != v,
    "<": lambda a, v: a < v,
    "<=": lambda a, v: a <= v,
    ">": lambda a, v: a > v,
    ">=": lambda a, v: a >= v,
    "contains": lambda a, v: v in a if isinstance(a, str) else v in _as_list(a),
    "icontains": lambda a, v: v.lower() in str(a).lower(),
    "startswith": lambda a, v: str(a).startswith(v),
    "endswith": lambda a, v: str(a).endswith(v),
    "glob": lambda a, v: fnmatch.fnmatchcase(str(a), v),
    "in": lambda a, v: a in v,
    "intersects": lambda a, v: bool(set(_as_list(a)) & set(v)),
    "pmatch": _pmatch,
    "exists": lambda a, v: True,
}


# --- the parser ---------------------------------------------------------------------------

class Parser:
    """Parses conditions with the rule file's lists and macros in scope.

    ``macro(name)`` returns a macro's parsed tree (the rules loader parses macros on first use
    and catches cycles); ``fields`` maps the field names an event can carry to their specs:
    any other field is an error (None: any name of a field's shape is taken).
    """

    def __init__(self, lists: Mapping[str, tuple] | None = None, macro: Callable[[str], Node] | None = None,
                 fields: Mapping[str, FieldSpec] | None = None):
        self.lists = lists or {}
        self.macro = macro
        self.known_fields = fields

    def parse(self, text: str) -> Node:
        if not isinstance(text, str) or not text.strip():
            raise ConditionError("the condition is empty")
        self._tokens, self._pos = tokenize(text), 0
        node = self._or()
        if self._pos < len(self._tokens):
            tok = self._tokens[self._pos]
            raise ConditionError(f"unexpected {tok.text!r}: expected and, or, or the end", tok.column)
        return node

    # recursive descent, one method per level of the grammar

    def _peek(self) -> _Token | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _next(self, expected: str) -> _Token:
        tok = self._peek()
        if tok is None:
            raise ConditionError(f"the condition ends where {expected} was expected")
        self._pos += 1
        return tok

    def _is_word(self, word: str) -> bool:
        tok = self._peek()
        return tok is not None and tok.kind == "word" and tok.text == word

    def _or(self) -> Node:
        children = [self._and()]
        while self._is_word("or"):
            self._pos += 1
            children.append(self._and())
        return children[0] if len(children) == 1 else Or(tuple(children))

    def _and(self) -> Node:
        children = [self._not()]
        while self._is_word("and"):
            self._pos += 1
            children.append(self._not())
        return children[0] if len(children) == 1 else And(tuple(children))

    def _not(self) -> Node:
        if self._is_word("not"):
            self._pos += 1
            return Not(self._not())
        return self._primary()

    def _primary(self) -> Node:
        tok = self._next("a field, a macro or (")
        if tok.kind == "lparen":
            node = self._or()
            close = self._next(")")
            if close.kind != "rparen":
                raise ConditionError(f"expected ) but found {close.text!r}", close.column)
            return node
        if tok.kind != "word" or tok.text in KEYWORDS:
            raise ConditionError(f"expected a field, a macro or ( but found {tok.text!r}", tok.column)
        if "." not in tok.text:
            return self._macro(tok)
        return self._check(tok)

    def _macro(self, tok: _Token) -> Node:
        if self.macro is None:
            raise ConditionError(f"unknown macro {tok.text!r}", tok.column)
        try:
            return self.macro(tok.text)
        except KeyError:
            raise ConditionError(f"unknown macro {tok.text!r}", tok.column) from None

    def _field(self, tok: _Token) -> FieldSpec | None:
        if not FIELD_NAME.match(tok.text):
            raise ConditionError(f"{tok.text!r} is not a field name", tok.column)
        base, _, index = tok.text.partition("[")
        if self.known_fields is None:
            return None
        spec = self.known_fields.get(base)
        if spec is None:
            raise ConditionError(f"unknown field {base!r}", tok.column)
        if bool(index) != spec.indexed:
            raise ConditionError(f"{base} {'takes an index, as ' + base + '[1]' if spec.indexed else 'takes no index'}",
                                 tok.column)
        return spec

    def _check(self, field_tok: _Token) -> Node:
        spec = self._field(field_tok)
        op_tok = self._next(f"an operator after {field_tok.text}")
        op = op_tok.text
        if op_tok.kind not in ("op", "word") or (op not in COMPARE_OPS and op not in LIST_OPS and op != "exists"):
            raise ConditionError(f"unknown operator {op!r} after {field_tok.text}", op_tok.column)
        if op == "exists":
            return Check(field_tok.text, op)
        if op in LIST_OPS:
            items = self._items(op_tok)
            return Check(field_tok.text, op, tuple(_typed(v, spec, field_tok.text, op_tok.column) for v in items))
        value = self._next(f"a value after {op}")
        if value.kind not in ("word", "string"):
            raise ConditionError(f"expected a value after {op} but found {value.text!r}", value.column)
        if op in ("<", "<=", ">", ">=") and spec is not None and spec.type != "int":
            raise ConditionError(f"{op} compares numbers; {field_tok.text} is text", op_tok.column)
        typed = value.text if op in ("contains", "icontains", "startswith", "endswith", "glob") \
            else _typed(value.text, spec, field_tok.text, value.column)
        return Check(field_tok.text, op, typed)

    def _items(self, op_tok: _Token) -> list[str]:
        open_tok = self._next("(")
        if open_tok.kind != "lparen":
            raise ConditionError(f"{op_tok.text} takes a list in parentheses, as (a, b)", open_tok.column)
        items: list[str] = []
        while True:
            tok = self._next("a list item or )")
            if tok.kind == "rparen" and not items:
                return items
            if tok.kind not in ("word", "string"):
                raise ConditionError(f"expected a list item but found {tok.text!r}", tok.column)
            if tok.kind == "word" and tok.text in self.lists:
                items.extend(self.lists[tok.text])
            else:
                items.append(tok.text)
            sep = self._next(", or )")
            if sep.kind == "rparen":
                return items
            if sep.kind != "comma":
                raise ConditionError(f"expected , or ) but found {sep.text!r}", sep.column)


def _typed(text, spec: FieldSpec | None, field: str, column: int):
    """A literal as the field's type: numbers for int fields (an error if it is not one)."""
    if spec is not None and spec.type == "int":
        try:
            return int(str(text), 0)
        except ValueError:
            raise ConditionError(f"{field} is a number; {text!r} is not", column) from None
    return str(text)

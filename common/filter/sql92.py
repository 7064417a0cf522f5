"""RocketMQ's SQL92 property filter: tokenizer, recursive-descent parser, closure compiler.

A subscription ``MessageSelector.by_sql("region = 'eu' AND amount > 100")`` is
compiled once, by :func:`compile_sql92`, into a tree of closures; a message
matches when the tree evaluates to TRUE over the message's properties (user
properties and system ones such as ``TAGS`` and ``KEYS``). Nothing is ever
handed to ``eval``.

Grammar (keywords case-insensitive; RocketMQ's ``docs/en/Example_Filter.md``)::

    expr        := or
    or          := and ( OR and )*
    and         := not ( AND not )*
    not         := NOT not | predicate
    predicate   := '(' expr ')' | TRUE | FALSE
                 | operand ( cmp operand
                           | [NOT] BETWEEN operand AND operand
                           | [NOT] IN '(' string ( ',' string )* ')'
                           | IS [NOT] NULL )
    cmp         := '=' | '<>' | '>' | '>=' | '<' | '<='
    operand     := identifier | number | string | TRUE | FALSE | NULL
    number      := ['-'|'+'] digits ['.' digits] [('e'|'E') ['-'|'+'] digits]
    string      := "'" ( any char but "'" | "''" )* "'"
    identifier  := (letter | '_' | '$') (letter | digit | '_' | '$' | '.')*

Semantics, as RocketMQ's filter module (ActiveMQ's selector) has them:

* three-valued logic: a comparison with an absent property is UNKNOWN, and
  ``NOT UNKNOWN`` is UNKNOWN, so ``a <> 1`` and ``NOT a > 1`` are both false
  for a message without ``a``; ``UNKNOWN AND FALSE`` is FALSE, ``UNKNOWN OR
  TRUE`` is TRUE; only TRUE matches.
* properties are strings. Against a number a property is read as a decimal
  number (``"7"``, ``"-2.5"``, ``"1e3"``); one that is not a number makes the
  comparison UNKNOWN (RocketMQ raises and the message does not match).
  Against a string it is compared as a string; against TRUE/FALSE it is read
  as Java's ``Boolean.valueOf`` does (``"true"`` in any case is TRUE).
* ``> >= < <=`` and BETWEEN take numbers: a string or boolean literal there
  is refused when the expression is compiled (RocketMQ: "cannot be
  compared"); two properties are compared as numbers.
* ``= NULL`` is refused: write ``IS NULL``. ``BETWEEN 5 AND 1`` is refused.
* ``IN`` takes a property on the left and string literals in the list.

Errors (:class:`SqlFilterError`) name the line and column of the fault:
``line 1, column 14: expected ')' to close the '(' at column 5, found end of
expression``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pocketmq.common.errors import PocketMQError

__all__ = ["MAX_EXPRESSION_CHARS", "SqlFilter", "SqlFilterError", "compile_sql92", "parse_number"]

MAX_EXPRESSION_CHARS = 4096  # longer expressions are refused: compiled per subscription
_MAX_DEPTH = 100  # nesting of parentheses and NOTs
_MAX_TERMS = 256  # predicates joined by AND / OR (bounds evaluation depth)

Props = Mapping[str, str]
Tri = bool | None  # TRUE, FALSE, UNKNOWN
Node = Callable[[Props], Tri]
Value = Callable[[Props], object]


class SqlFilterError(PocketMQError, ValueError):
    """An SQL92 expression that does not compile; ``line`` and ``column`` are 1-based."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.reason = message
        self.line = line
        self.column = column


# -- tokens -----------------------------------------------------------------------------
KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"})

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|>=|<=|!=|[=<>(),+-])
""",
    re.VERBOSE,
)

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # number, string, ident, keyword, op, end
    text: str  # keywords upper-cased; strings unquoted
    pos: int  # index in the expression


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] == "'":
                raise _error(
                    text, pos, "string literal is not closed; a quote inside a string is written ''"
                )
            raise _error(text, pos, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        raw = m.group()
        if kind == "ident" and raw.upper() in KEYWORDS:
            out.append(Token("keyword", raw.upper(), pos))
        elif kind == "string":
            out.append(Token("string", raw[1:-1].replace("''", "'"), pos))
        elif kind == "op" and raw == "!=":
            raise _error(text, pos, "'!=' is not SQL92; write '<>'")
        elif kind != "ws":
            out.append(Token(kind, raw, pos))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


def _error(text: str, pos: int, message: str) -> SqlFilterError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return SqlFilterError(message, line, column)


def _describe(token: Token) -> str:
    if token.kind == "end":
        return "end of expression"
    text = token.text if len(token.text) <= 40 else token.text[:40] + "..."
    if token.kind == "string":
        return f"string '{text}'"
    return f"{text!r}"


def parse_number(text: str) -> int | float | None:
    """A property's value as a number, or None when it is not one (``"abc"``, ``""``)."""
    if not _NUMBER.fullmatch(text):
        return None
    if "." in text or "e" in text or "E" in text:
        return float(text)
    return int(text)


# -- operands ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Operand:
    """A property (``name``) or a constant (``value``; None is NULL)."""

    pos: int
    name: str | None = None
    value: object = None

    @property
    def is_property(self) -> bool:
        return self.name is not None


def _as_number(v: object) -> int | float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return v
    if isinstance(v, str):
        return parse_number(v)
    return None


def _equal(lv: object, rv: object) -> Tri:
    """RocketMQ's '=' of two non-null values, coercing a property string to the other side."""
    if isinstance(lv, bool) or isinstance(rv, bool):
        if isinstance(lv, str):
            lv = lv.lower() == "true"
        if isinstance(rv, str):
            rv = rv.lower() == "true"
        return lv == rv if isinstance(lv, bool) and isinstance(rv, bool) else False
    if isinstance(lv, str) and isinstance(rv, str):
        return lv == rv
    ln, rn = _as_number(lv), _as_number(rv)
    if ln is None or rn is None:
        return None  # a property that is not a number, against a number
    return ln == rn


def _order(lv: object, rv: object) -> int | None:
    ln, rn = _as_number(lv), _as_number(rv)
    if ln is None or rn is None:
        return None
    return (ln > rn) - (ln < rn)


_COMPARISONS = ("=", "<>", ">", ">=", "<", "<=")
_ORDER_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


# -- parser -----------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.terms = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        if self.tok.kind == kind and self.tok.text == text:
            self.i += 1
            return True
        return False

    def fail(self, message: str, token: Token | None = None) -> SqlFilterError:
        token = token or self.tok
        return _error(self.text, token.pos, f"{message}, found {_describe(token)}")

    def expect(self, kind: str, text: str, what: str) -> Token:
        if self.tok.kind != kind or self.tok.text != text:
            raise self.fail(f"expected {what}")
        return self.take()

    # expr := or
    def parse(self) -> Node:
        node = self.or_()
        if self.tok.kind != "end":
            raise self.fail("expected AND, OR or the end of the expression")
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.accept("keyword", "OR"):
            node = _or(node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.accept("keyword", "AND"):
            node = _and(node, self.not_())
        return node

    def not_(self) -> Node:
        if self.accept("keyword", "NOT"):
            return _not(self.nested(self.not_))
        return self.predicate()

    def nested(self, parse: Callable[[], Node]) -> Node:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail(f"expression nests deeper than {_MAX_DEPTH} levels")
        try:
            return parse()
        finally:
            self.depth -= 1

    def predicate(self) -> Node:
        tok = self.tok
        self.terms += 1
        if self.terms > _MAX_TERMS:
            raise self.fail(f"expression has more than {_MAX_TERMS} predicates")
        if tok.kind == "op" and tok.text == "(":
            self.take()
            node = self.nested(self.or_)
            if not self.accept("op", ")"):
                col = _error(self.text, tok.pos, "").column
                raise self.fail(f"expected ')' to close the '(' at column {col}")
            return node
        left = self.operand()
        if isinstance(left.value, bool) and not self.starts_comparison():
            value = left.value
            return lambda props: value  # a bare TRUE or FALSE
        return self.comparison(left)

    def starts_comparison(self) -> bool:
        tok = self.tok
        return (tok.kind == "op" and tok.text in _COMPARISONS) or (
            tok.kind == "keyword" and tok.text in ("NOT", "BETWEEN", "IN", "IS")
        )

    def comparison(self, left: _Operand) -> Node:
        tok = self.tok
        if tok.kind == "op" and tok.text in _COMPARISONS:
            self.take()
            right = self.operand()
            return _compare(self, tok, left, right)
        negate = self.accept("keyword", "NOT")
        if self.accept("keyword", "BETWEEN"):
            low = self.operand()
            self.expect("keyword", "AND", "AND between the bounds of BETWEEN")
            high = self.operand()
            return _between(self, tok, left, low, high, negate)
        if self.tok.kind == "keyword" and self.tok.text == "IN":
            return _in(self, left, self.in_list(), negate)
        if negate:
            raise self.fail("expected BETWEEN or IN after NOT")
        if self.accept("keyword", "IS"):
            negate = self.accept("keyword", "NOT")
            self.expect("keyword", "NULL", "NULL after IS" + (" NOT" if negate else ""))
            return _is_null(left, negate)
        raise self.fail("expected a comparison (=, <>, >, >=, <, <=), BETWEEN, IN or IS")

    def in_list(self) -> list[str]:
        in_tok = self.take()
        self.expect("op", "(", "'(' after IN")
        values: list[str] = []
        while True:
            if self.tok.kind != "string":
                raise self.fail("IN takes a list of string literals such as ('a', 'b')")
            values.append(self.take().text)
            if self.accept("op", ")"):
                return values
            if not self.accept("op", ","):
                col = _error(self.text, in_tok.pos, "").column
                raise self.fail(f"expected ',' or ')' in the IN list at column {col}")

    def operand(self) -> _Operand:
        tok = self.take()
        if tok.kind == "ident":
            return _Operand(tok.pos, name=tok.text)
        if tok.kind == "string":
            return _Operand(tok.pos, value=tok.text)
        if tok.kind == "number":
            return _Operand(tok.pos, value=_literal_number(tok.text))
        if tok.kind == "op" and tok.text in ("-", "+") and self.tok.kind == "number":
            number = _literal_number(self.take().text)
            return _Operand(tok.pos, value=-number if tok.text == "-" else number)
        if tok.kind == "keyword" and tok.text in ("TRUE", "FALSE"):
            return _Operand(tok.pos, value=tok.text == "TRUE")
        if tok.kind == "keyword" and tok.text == "NULL":
            return _Operand(tok.pos, value=None)
        self.i -= 1
        raise self.fail("expected a property name, a number, a 'string', TRUE, FALSE or NULL")


def _literal_number(text: str) -> int | float:
    value = parse_number(text)
    assert value is not None  # the tokenizer matched a number
    return value


def _value(operand: _Operand) -> Value:
    name, constant = operand.name, operand.value
    if name is not None:
        return lambda props: props.get(name)
    return lambda props: constant


def _compare(p: _Parser, op: Token, left: _Operand, right: _Operand) -> Node:
    for side in (left, right):
        if not side.is_property and side.value is None:
            raise _error(
                p.text,
                side.pos,
                f"NULL cannot be compared with '{op.text}'; write IS NULL or IS NOT NULL",
            )
        if op.text not in ("=", "<>") and not side.is_property and _as_number(side.value) is None:
            raise _error(
                p.text, side.pos, f"'{op.text}' compares numbers; {_show(side)} cannot be compared"
            )
    lval, rval = _value(left), _value(right)
    if op.text in ("=", "<>"):

        def equal(props: Props) -> Tri:
            lv, rv = lval(props), rval(props)
            if lv is None or rv is None:
                return None
            return _equal(lv, rv)

        return equal if op.text == "=" else _not(equal)
    test = _ORDER_TESTS[op.text]

    def order(props: Props) -> Tri:
        lv, rv = lval(props), rval(props)
        if lv is None or rv is None:
            return None
        c = _order(lv, rv)
        return None if c is None else test(c)

    return order


def _show(operand: _Operand) -> str:
    v = operand.value
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    return f"'{v}'" if isinstance(v, str) else str(v)


def _between(
    p: _Parser, tok: Token, value: _Operand, low: _Operand, high: _Operand, negate: bool
) -> Node:
    for side in (value, low, high):
        if not side.is_property and _as_number(side.value) is None:
            raise _error(
                p.text, side.pos, f"BETWEEN compares numbers; {_show(side)} cannot be compared"
            )
    if not low.is_property and not high.is_property:
        lo, hi = _as_number(low.value), _as_number(high.value)
        assert lo is not None and hi is not None
        if lo > hi:
            raise _error(
                p.text,
                low.pos,
                f"BETWEEN {_show(low)} AND {_show(high)} matches "
                "nothing; the lower bound comes first",
            )
    ge = _compare(p, Token("op", ">=", tok.pos), value, low)
    le = _compare(p, Token("op", "<=", tok.pos), value, high)
    if negate:  # RocketMQ: NOT BETWEEN a AND b is value < a OR value > b
        return _or(_not(ge), _not(le))
    return _and(ge, le)


def _in(p: _Parser, left: _Operand, values: list[str], negate: bool) -> Node:
    if not left.is_property:
        raise _error(p.text, left.pos, "IN tests a property; put a property name before IN")
    name = left.name
    assert name is not None
    allowed = frozenset(values)

    def member(props: Props) -> Tri:
        v = props.get(name)
        return None if v is None else v in allowed

    return _not(member) if negate else member


def _is_null(operand: _Operand, negate: bool) -> Node:
    if operand.is_property:
        name = operand.name
        assert name is not None
        if negate:
            return lambda props: name in props
        return lambda props: name not in props
    result = (operand.value is None) != negate
    return lambda props: result


def _not(node: Node) -> Node:
    def negated(props: Props) -> Tri:
        v = node(props)
        return None if v is None else not v

    return negated


def _and(left: Node, right: Node) -> Node:
    def both(props: Props) -> Tri:
        lv = left(props)
        if lv is False:
            return False
        rv = right(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return both


def _or(left: Node, right: Node) -> Node:
    def either(props: Props) -> Tri:
        lv = left(props)
        if lv is True:
            return True
        rv = right(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return either


# -- the compiled filter ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled SQL92 expression; :meth:`matches` is what a pull calls per record."""

    expression: str
    _root: Node

    def matches(self, properties: Props) -> bool:
        return self._root(properties) is True

    def evaluate(self, properties: Props) -> Tri:
        """TRUE, FALSE or UNKNOWN (None): what the expression says of these properties."""
        return self._root(properties)


def compile_sql92(expression: str) -> SqlFilter:
    """Compile *expression* once; raises :class:`SqlFilterError` with its position."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise SqlFilterError(
            f"expression is {len(expression)} characters; at most "
            f"{MAX_EXPRESSION_CHARS} are allowed",
            1,
            1,
        )
    if not expression.strip():
        raise SqlFilterError(
            'expression is empty; an SQL92 filter such as "a > 1" is '
            "needed (TRUE matches every message)",
            1,
            1,
        )
    return SqlFilter(expression, _Parser(expression).parse())

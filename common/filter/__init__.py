"""Message filters of a subscription: RocketMQ's TAG and SQL92 expression types.

A subscription names a topic and a :class:`MessageSelector`: a tag expression
(``"*"`` or ``"TagA || TagB"``, parsed by :mod:`.tags`, filtered on the consume
queue's tag codes) or an SQL92 expression over the message's properties
(:mod:`.sql92`, filtered on the stored records' properties at the broker). A
plain string is a tag expression.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketmq.common.filter.sql92 import (
    MAX_EXPRESSION_CHARS,
    SqlFilter,
    SqlFilterError,
    compile_sql92,
)
from pocketmq.common.filter.tags import SUB_ALL, TagExpressionError, parse_tag_expression

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "SQL92",
    "SUB_ALL",
    "TAG",
    "MessageSelector",
    "SqlFilter",
    "SqlFilterError",
    "TagExpressionError",
    "compile_sql92",
    "parse_tag_expression",
]

TAG = "TAG"  # RocketMQ's ExpressionType.TAG
SQL92 = "SQL92"  # RocketMQ's ExpressionType.SQL92


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """What a subscription reads of its topic: ``by_tag("A || B")`` or ``by_sql("a > 1")``."""

    type: str = TAG
    expression: str = "*"

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        return cls(TAG, (expression or "*").strip())

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """An SQL92 filter; compiled here too, so a typo fails at ``subscribe``."""
        compile_sql92(expression)
        return cls(SQL92, expression.strip())

    @classmethod
    def of(cls, value: str | MessageSelector | None) -> MessageSelector:
        """A selector as given, or a plain string read as a tag expression."""
        if isinstance(value, MessageSelector):
            return value
        return cls.by_tag(value or "*")

    @property
    def is_sql(self) -> bool:
        return self.type == SQL92

    def __str__(self) -> str:
        return f"SQL92({self.expression})" if self.is_sql else self.expression

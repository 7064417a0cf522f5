"""RocketMQ's tag expression, parsed once for the client, the broker, the CLI and Spark.

The grammar (RocketMQ's ``SubscriptionData`` with ``ExpressionType.TAG``)::

    expression := "*" | "" | tag ( "||" tag )*      blanks around a tag are dropped;
                                                    empty tags between bars are skipped

``"*"``, ``""``, blanks or ``None`` read every tag (``None`` back); anything else
is the set of tags it names. An expression that names no tag (``"||"``) is a
:class:`TagExpressionError`, a ``ValueError`` that each layer turns into its
own error: ``INVALID_ARGUMENT`` at the broker, an option error in Spark, a usage
error in the CLI.
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = ["SUB_ALL", "TagExpressionError", "parse_tag_expression"]

SUB_ALL = "*"  # RocketMQ's SubscriptionData.SUB_ALL: every tag


class TagExpressionError(PocketMQError, ValueError):
    """A tag expression that names no tag; ``expression`` is the text as given."""

    def __init__(self, message: str, expression: str) -> None:
        super().__init__(message)
        self.expression = expression


def parse_tag_expression(
    expression: str | None, *, what: str = "tag expression"
) -> frozenset[str] | None:
    """``"*"``/``""`` -> None (every tag); ``" A ||B|| "`` -> {"A", "B"}.

    *what* names the input in the error (``"subscription"``, ``"--expr"``).
    """
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise TagExpressionError(
            f"{what} {expression!r} names no tags; use '*' for all messages or 'TagA || TagB'",
            expression or "",
        )
    return tags

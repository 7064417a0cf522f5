"""A comparable picture of protobuf schemas: every message, field, enum and method.

Imports neither the official client nor PocketMQ, so the agent (which has the
first) and the tests (which have the second) both use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def schema_of(files: Iterable[Any]) -> dict[str, list[list[Any]]]:
    """Full name -> sorted rows: fields with number, type, label, oneof, presence."""
    out: dict[str, list[list[Any]]] = {}

    def enum(e: Any) -> None:
        out[e.full_name] = sorted([v.name, v.number] for v in e.values)

    def message(m: Any) -> None:
        out[m.full_name] = sorted(
            [
                f.name,
                f.number,
                f.type,
                f.is_repeated,
                f.message_type.full_name if f.message_type else "",
                f.enum_type.full_name if f.enum_type else "",
                f.containing_oneof.name if f.containing_oneof else "",
                f.has_presence,
            ]
            for f in m.fields
        )
        for nested in m.nested_types:
            message(nested)
        for nested_enum in m.enum_types:
            enum(nested_enum)

    for file in files:
        for m in file.message_types_by_name.values():
            message(m)
        for e in file.enum_types_by_name.values():
            enum(e)
        for service in file.services_by_name.values():
            out[service.full_name] = sorted(
                [
                    m.name,
                    m.input_type.full_name,
                    m.output_type.full_name,
                    m.client_streaming,
                    m.server_streaming,
                ]
                for m in service.methods
            )
    return out

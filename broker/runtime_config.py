"""UpdateBrokerConfig: the settings a running broker may change (RocketMQ's
``updateBrokerConfig``), and how each reaches the component that reads it.

Only keys listed in :data:`UPDATABLE` change at runtime; each names the live
attribute it sets. Anything else (ports, paths, store geometry, roles,
security) is refused with the list of keys that may change: those need a
restart. A change is validated as a whole by building the new
:class:`~pocketmq.broker.config.BrokerConfig` (its ``__post_init__``), applied
to every component, and kept in memory only: the configuration file is the
operator's, so a restart returns to it.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Callable
from typing import Any

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.common.errors import ConfigError

__all__ = ["UPDATABLE", "RuntimeConfig"]

log = logging.getLogger(__name__)

# key -> (component attribute of the Broker, the component's attribute it sets)
UPDATABLE: dict[str, tuple[str, str]] = {
    "auto_create_topic_enable": ("topics", "_auto_create_enable"),
    "max_pull_messages": ("pull_service", "_max_messages"),
    "register_interval_seconds": ("registration", "_interval_s"),
    "max_in_flight_requests": ("flow_control", "max_total"),
    "max_in_flight_requests_per_connection": ("flow_control", "max_per_connection"),
    "max_queued_response_bytes": ("flow_control", "max_bytes_total"),
    "max_queued_response_bytes_per_connection": ("flow_control", "max_bytes_per_connection"),
}


def _parse(name: str, text: str, tp: Any) -> Any:
    inner = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
    try:
        if inner is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if inner is int:
            return int(text, 0)
        if inner is float:
            return float(text)
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[inner]
        raise IllegalArgumentError(f"{name}: {text!r} is not {kind}") from None
    return text


class RuntimeConfig:
    """Applies UpdateBrokerConfig to a running broker's components."""

    def __init__(
        self,
        get_config: Callable[[], BrokerConfig],
        set_config: Callable[[BrokerConfig], None],
        component: Callable[[str], Any],
    ) -> None:
        self._get = get_config
        self._set = set_config
        self._component = component

    def update(self, updates: dict[str, str]) -> dict[str, str]:
        """Apply *updates* (key -> text); returns the changed keys' previous values."""
        if not updates:
            raise IllegalArgumentError(
                "no setting given; updatable keys: " + ", ".join(sorted(UPDATABLE))
            )
        refused = sorted(set(updates) - set(UPDATABLE))
        if refused:
            raise IllegalArgumentError(
                f"{', '.join(refused)} cannot change while the broker runs (restart it with "
                f"the new value); updatable keys: {', '.join(sorted(UPDATABLE))}"
            )
        config = self._get()
        hints = typing.get_type_hints(BrokerConfig)
        values = {k: _parse(k, v, hints[k]) for k, v in updates.items()}
        try:
            new = dataclasses.replace(config, **values)
        except (ConfigError, ValueError, TypeError) as exc:
            raise IllegalArgumentError(str(exc)) from None
        previous = {k: str(getattr(config, k)) for k in values}
        for key, value in values.items():
            owner_name, attribute = UPDATABLE[key]
            owner = self._component(owner_name)
            if owner is not None:
                setattr(owner, attribute, value)
        self._set(new)
        log.info(
            "configuration changed at runtime: %s",
            ", ".join(f"{k} {previous[k]} -> {v}" for k, v in values.items()),
        )
        return previous

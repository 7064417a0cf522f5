"""Loading a component's frozen config dataclass from defaults, TOML and flags.

Each component (nameserver, broker, store) has one frozen dataclass whose
fields are its keys. The executables call :func:`add_config_flags` to give
every field a ``--kebab-case`` flag, then :func:`load_config` to build the
instance. Precedence, lowest first::

    dataclass defaults  <  TOML file (optionally one [section])  <  overrides  <  flags given

A flag counts only when given on the command line: its argparse default is
``None``. Values are converted to the field's type (``int``, ``float``,
``str``, ``bool``, ``pathlib.Path``, an ``Enum`` by value, ``tuple[str, int]``
from ``"host:port"``, and ``X | None`` of those). Every mistake is a
:class:`~pocketmq.common.errors.ConfigError` naming the key, where it came
from and what was expected; validation in the dataclass's ``__post_init__``
raises ``ConfigError`` itself and is passed through unchanged.

Help text for a flag comes from the field's ``metadata["help"]`` (comments are
not visible at runtime), followed by the default.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import pathlib
import tomllib
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from pocketmq.common.errors import ConfigError

__all__ = ["add_config_flags", "load_config", "parse_host_port"]

T = TypeVar("T")

# Namespace attribute where add_config_flags records, per config class, which
# argparse dest holds each field; load_config reads it back, so prefixed flags
# (--broker-port) find their field (port) without load_config knowing the prefix.
_FLAG_DESTS_ATTR = "_pocketmq_config_flag_dests"


def parse_host_port(text: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6addr]:port"`` as ``(host, port)``.

    Raises ``ValueError`` with a sentence saying what is wrong.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not host:port (for example 127.0.0.1:9876)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 host in brackets, like [::1]:9876")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"{text!r} has an empty or blank host")
    if not port_text.isdigit():
        raise ValueError(f"{text!r} has port {port_text!r}; a port is a number 0..65535")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{text!r} has port {port}; a port is a number 0..65535")
    return host, port


# --------------------------------------------------------------------- field types


def _field_types(config_cls: type) -> dict[str, Any]:
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls!r} is not a dataclass")
    # Resolves string annotations (`from __future__ import annotations`).
    return typing.get_type_hints(config_cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``; ``(tp, False)`` otherwise."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
        raise TypeError(f"unsupported config field type {tp!r}")
    return tp, False


def _is_host_port(tp: Any) -> bool:
    return typing.get_origin(tp) is tuple and typing.get_args(tp) == (str, int)


def _type_name(tp: Any) -> str:
    inner, optional = _unwrap_optional(tp)
    if _is_host_port(inner):
        name = '"host:port" string'
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        name = "one of " + ", ".join(repr(m.value) for m in inner)
    elif inner is pathlib.Path:
        name = "path string"
    else:
        name = getattr(inner, "__name__", str(inner))
    return f"{name} or none" if optional else name


def _check_supported(name: str, tp: Any) -> None:
    inner, _ = _unwrap_optional(tp)
    if inner in (int, float, str, bool, pathlib.Path) or _is_host_port(inner):
        return
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return
    raise TypeError(f"config field {name!r} has unsupported type {tp!r}")


# ---------------------------------------------------------------- value conversion


def _convert(value: Any, tp: Any) -> Any:
    """*value* (from TOML or code) as *tp*; ``ValueError`` when it does not fit.

    TOML values are typed, so no string is parsed into a number or a bool:
    ``port = "9876"`` is a mistake worth reporting.
    """
    inner, optional = _unwrap_optional(tp)
    if value is None and optional:
        return None
    if inner is bool:
        if isinstance(value, bool):
            return value
    elif inner is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif inner is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif inner is str:
        if isinstance(value, str):
            return value
    elif inner is pathlib.Path:
        if isinstance(value, str | pathlib.PurePath):
            return pathlib.Path(value)
    elif _is_host_port(inner):
        if isinstance(value, str):
            return parse_host_port(value)
        if (
            isinstance(value, tuple)
            and len(value) == 2
            and isinstance(value[0], str)
            and isinstance(value[1], int)
        ):
            return value
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        return _convert_enum(value, inner)
    raise ValueError(f"expected {_type_name(tp)}")


def _convert_enum(value: Any, enum_cls: type[enum.Enum]) -> enum.Enum:
    if isinstance(value, enum_cls):
        return value
    for member in enum_cls:
        if member.value == value:
            return member
    valid = ", ".join(repr(m.value) for m in enum_cls)
    raise ValueError(f"expected one of {valid}")


def _flag_converter(name: str, tp: Any) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses command-line text as *tp*."""
    inner, _ = _unwrap_optional(tp)

    def convert(text: str) -> Any:
        try:
            if inner is int:
                return int(text, 0)
            if inner is float:
                return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a valid {name}: expected {_type_name(tp)}"
            ) from None
        try:
            if inner is pathlib.Path:
                return pathlib.Path(text)
            if _is_host_port(inner):
                return parse_host_port(text)
            if isinstance(inner, type) and issubclass(inner, enum.Enum):
                return _convert_enum(text, inner)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {name}: {exc}") from None
        return text

    convert.__name__ = _type_name(tp)  # argparse names it in "invalid <name> value"
    return convert


# ------------------------------------------------------------------------- flags


def _default_text(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return "required"
    if isinstance(default, enum.Enum):
        default = default.value
    elif isinstance(default, tuple) and len(default) == 2:
        default = f"{default[0]}:{default[1]}"
    elif isinstance(default, bool):
        default = str(default).lower()
    return f"default: {default}"


def add_config_flags(
    parser: argparse.ArgumentParser,
    config_cls: type,
    *,
    skip: Collection[str] = (),
    prefix: str = "",
) -> None:
    """Add one ``--{prefix}{field-name}`` flag per field of *config_cls*.

    Every flag defaults to ``None`` so :func:`load_config` can tell "not given"
    from a value; bool fields get ``--x`` / ``--no-x``. The argparse dest is
    ``{prefix}{field_name}`` with dashes as underscores (``args.broker_port``).
    Fields named in *skip* get no flag (a command that sets them otherwise).
    """
    hints = _field_types(config_cls)
    dests: dict[str, str] = {}
    for f in dataclasses.fields(config_cls):
        if f.name in skip:
            continue
        tp = hints[f.name]
        _check_supported(f.name, tp)
        flag = "--" + (prefix + f.name).replace("_", "-")
        dest = (prefix + f.name).replace("-", "_")
        help_text = f.metadata.get("help", "")
        help_text = f"{help_text} ({_default_text(f)})" if help_text else f"({_default_text(f)})"
        help_text = help_text.replace("%", "%%")  # argparse %-formats help ("%RETRY%g")
        inner, _ = _unwrap_optional(tp)
        if inner is bool:
            parser.add_argument(
                flag, dest=dest, default=None, action=argparse.BooleanOptionalAction, help=help_text
            )
            dests[f.name] = dest
            continue
        kwargs: dict[str, Any] = {
            "dest": dest,
            "default": None,
            "help": help_text,
            "type": _flag_converter(f.name, tp),
        }
        if _is_host_port(inner):
            kwargs["metavar"] = "HOST:PORT"
        elif isinstance(inner, type) and issubclass(inner, enum.Enum):
            kwargs["metavar"] = "{" + ",".join(str(m.value) for m in inner) + "}"
        else:
            kwargs["metavar"] = f.name.rsplit("_", 1)[-1].upper()  # PORT, SECONDS, DIR
        parser.add_argument(flag, **kwargs)
        dests[f.name] = dest
    registry = dict(parser.get_default(_FLAG_DESTS_ATTR) or {})
    registry[config_cls] = dests
    parser.set_defaults(**{_FLAG_DESTS_ATTR: registry})


def _flag_dests(config_cls: type, args: argparse.Namespace | None) -> dict[str, str]:
    """Field name -> argparse dest holding its flag's value."""
    registry = getattr(args, _FLAG_DESTS_ATTR, None) or {}
    dests = registry.get(config_cls)
    if dests is None:
        # A namespace built without add_config_flags: fields by their own names.
        dests = {f.name: f.name for f in dataclasses.fields(config_cls)}
    return dict(dests)


# -------------------------------------------------------------------------- TOML


def _read_toml(toml_path: str, section: str | None) -> dict[str, Any]:
    try:
        with open(toml_path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {toml_path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {toml_path} is not valid TOML: {exc}") from None
    if section is None:
        return data
    table = data.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(
            f"config file {toml_path}: [{section}] must be a table, "
            f"found {type(table).__name__} {table!r}"
        )
    return table


def _suggestions(key: str, valid: Collection[str]) -> list[str]:
    def norm(name: str) -> str:
        return name.replace("-", "").replace("_", "").lower()

    exact = [v for v in valid if norm(v) == norm(key)]
    if exact:
        return exact
    by_norm = {norm(v): v for v in valid}
    close = difflib.get_close_matches(norm(key), list(by_norm), n=3, cutoff=0.6)
    return [by_norm[c] for c in close]


def _unknown_key_error(key: str, where: str, valid: Collection[str]) -> ConfigError:
    near = _suggestions(key, valid)
    hint = (
        f"did you mean {' or '.join(repr(n) for n in near)}?"
        if near
        else f"valid keys: {', '.join(sorted(valid))}"
    )
    return ConfigError(f"unknown key {key!r} in {where}; {hint}")


def _typed_values(
    raw: Mapping[str, Any], hints: Mapping[str, Any], where: str, valid: Collection[str]
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in valid:
            raise _unknown_key_error(key, where, valid)
        try:
            values[key] = _convert(value, hints[key])
        except ValueError as exc:
            raise ConfigError(
                f"{key} in {where}: {exc}; got {type(value).__name__} {value!r}"
            ) from None
    return values


# ------------------------------------------------------------------------ loading


def load_config(
    config_cls: type[T],
    *,
    toml_path: str | None = None,
    args: argparse.Namespace | None = None,
    section: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """Build *config_cls* from its defaults, a TOML file, overrides and flags.

    *section* selects one ``[table]`` of the file (a missing table is empty).
    *overrides* are values set by code (an environment default, a sibling
    component's setting); they are typed like TOML values. Only flags given
    on the command line count.
    """
    hints = _field_types(config_cls)
    field_list = dataclasses.fields(config_cls)  # type: ignore[arg-type]
    valid = [f.name for f in field_list]
    values: dict[str, Any] = {}
    if toml_path is not None:
        where = f"{toml_path} [{section}]" if section else toml_path
        values.update(_typed_values(_read_toml(toml_path, section), hints, where, valid))
    if overrides:
        values.update(_typed_values(overrides, hints, "overrides", valid))
    dests = _flag_dests(config_cls, args)
    if args is not None:
        values.update(
            {
                name: getattr(args, dest)
                for name, dest in dests.items()
                if getattr(args, dest, None) is not None
            }
        )
    missing = [
        f.name
        for f in field_list
        if f.name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        flags = ", ".join("--" + dests.get(m, m).replace("_", "-") for m in missing)
        raise ConfigError(
            f"{config_cls.__name__} needs {', '.join(missing)}: set it in the "
            f"config file or with {flags}"
        )
    return config_cls(**values)

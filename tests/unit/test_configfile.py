"""The config loader: defaults < TOML < overrides < flags, with errors naming the key."""

from __future__ import annotations

import argparse
import enum
import pathlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pocketmq.common.configfile import add_config_flags, load_config, parse_host_port
from pocketmq.common.errors import ConfigError


class Flush(enum.Enum):
    ASYNC = "async"
    SYNC = "sync"


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoConfig:
    name: str = "broker-a"
    port: int = field(default=10911, metadata={"help": "gRPC port"})
    ratio: float = 0.75
    enabled: bool = True
    flush: Flush = Flush.ASYNC
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    data_dir: pathlib.Path | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequiredConfig:
    data_dir: str
    port: int = 1


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "demo.toml"
    path.write_text(text)
    return str(path)


def parse(argv: list[str], **kwargs: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_flags(parser, DemoConfig, **kwargs)  # type: ignore[arg-type]
    return parser.parse_args(argv)


# ----------------------------------------------------------------------- precedence


def test_defaults_apply_when_nothing_is_given() -> None:
    assert load_config(DemoConfig) == DemoConfig()


def test_toml_values_are_converted_to_field_types(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
name = "broker-b"
port = 20911
ratio = 1            # an int is fine for a float field
enabled = false
flush = "sync"
store_host = "10.0.0.7:30911"
data_dir = "/var/lib/pocketmq"
""",
    )
    config = load_config(DemoConfig, toml_path=path)
    assert config == DemoConfig(
        name="broker-b",
        port=20911,
        ratio=1.0,
        enabled=False,
        flush=Flush.SYNC,
        store_host=("10.0.0.7", 30911),
        data_dir=Path("/var/lib/pocketmq"),
    )
    assert isinstance(config.ratio, float)


def test_precedence_is_defaults_then_toml_then_overrides_then_flags(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'name = "from-toml"\nport = 1\nratio = 0.5\n')
    args = parse(["--port", "3"])
    config = load_config(
        DemoConfig, toml_path=path, args=args, overrides={"port": 2, "ratio": 0.25}
    )
    assert config.name == "from-toml"
    assert config.ratio == 0.25
    assert config.port == 3
    assert config.enabled is True


def test_flags_not_given_do_not_override_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "port = 7\nenabled = false\n")
    config = load_config(DemoConfig, toml_path=path, args=parse([]))
    assert config.port == 7
    assert config.enabled is False


def test_section_selects_one_table(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[nameserver]\nport = 9877\n\n[broker]\nport = 10912\n")
    assert load_config(DemoConfig, toml_path=path, section="broker").port == 10912
    assert load_config(DemoConfig, toml_path=path, section="missing") == DemoConfig()


# ---------------------------------------------------------------------------- flags


def test_every_field_gets_a_kebab_case_flag() -> None:
    args = parse(
        [
            "--name",
            "x",
            "--port",
            "0x10",
            "--ratio",
            "0.1",
            "--no-enabled",
            "--flush",
            "sync",
            "--store-host",
            "[::1]:1",
            "--data-dir",
            "/d",
        ]
    )
    config = load_config(DemoConfig, args=args)
    assert config == DemoConfig(
        name="x",
        port=16,
        ratio=0.1,
        enabled=False,
        flush=Flush.SYNC,
        store_host=("::1", 1),
        data_dir=Path("/d"),
    )


def test_prefixed_flags_find_their_fields_and_skip_leaves_fields_out() -> None:
    parser = argparse.ArgumentParser()
    add_config_flags(parser, DemoConfig, prefix="broker-", skip=("data_dir",))
    add_config_flags(parser, RequiredConfig, prefix="store-")
    args = parser.parse_args(["--broker-port", "5", "--store-port", "6", "--store-data-dir", "/s"])
    assert args.broker_port == 5
    assert not hasattr(args, "broker_data_dir")
    assert load_config(DemoConfig, args=args).port == 5
    assert load_config(RequiredConfig, args=args) == RequiredConfig(data_dir="/s", port=6)


def test_help_shows_metadata_help_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="demo")
    add_config_flags(parser, DemoConfig)
    parser.print_help()
    out = " ".join(capsys.readouterr().out.split())
    assert "--port PORT gRPC port (default: 10911)" in out
    assert "--enabled, --no-enabled (default: true)" in out
    assert "--store-host HOST:PORT (default: 127.0.0.1:10911)" in out
    assert "--flush {async,sync} (default: async)" in out


def test_bad_flag_value_is_a_usage_error_naming_the_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--store-host", "nohost"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "store_host" in err and "host:port" in err


# --------------------------------------------------------------------------- errors


def test_unknown_toml_key_names_key_file_and_close_valid_keys(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "prot = 1\n")
    with pytest.raises(ConfigError) as exc:
        load_config(DemoConfig, toml_path=path)
    message = str(exc.value)
    assert "'prot'" in message and path in message and "did you mean 'port'" in message


def test_camel_or_kebab_key_suggests_the_snake_case_field(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "storeHost = '1.2.3.4:5'\n")
    with pytest.raises(ConfigError, match="did you mean 'store_host'"):
        load_config(DemoConfig, toml_path=path)


def test_unknown_key_without_a_close_match_lists_valid_keys(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "zzzzzz = 1\n")
    with pytest.raises(ConfigError, match="valid keys: data_dir, enabled, flush, name"):
        load_config(DemoConfig, toml_path=path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('port = "9876"', "port in .*expected int; got str '9876'"),
        ("port = true", "port in .*expected int; got bool True"),
        ("ratio = 'x'", "ratio in .*expected float; got str 'x'"),
        ("enabled = 1", "enabled in .*expected bool; got int 1"),
        ("flush = 'fast'", "flush in .*expected one of 'async', 'sync'; got str 'fast'"),
        ("store_host = 'nohost'", "store_host in .*not host:port"),
        ("store_host = 'h:99999'", "store_host in .*port 99999"),
        ("name = 3", "name in .*expected str; got int 3"),
    ],
)
def test_wrong_type_names_key_expected_type_and_value(
    tmp_path: Path, line: str, expected: str
) -> None:
    path = write_toml(tmp_path, line + "\n")
    with pytest.raises(ConfigError, match=expected):
        load_config(DemoConfig, toml_path=path)


def test_validation_errors_from_post_init_propagate(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "port = 70000\n")
    with pytest.raises(ConfigError, match=r"port must be 0\.\.65535, got 70000"):
        load_config(DemoConfig, toml_path=path)


def test_missing_required_key_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError, match=r"RequiredConfig needs data_dir.*--data-dir"):
        load_config(RequiredConfig)


def test_unreadable_or_invalid_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(DemoConfig, toml_path=str(tmp_path / "absent.toml"))
    path = write_toml(tmp_path, "port = = 1\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(DemoConfig, toml_path=path)


def test_section_that_is_not_a_table_is_a_config_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "broker = 3\n")
    with pytest.raises(ConfigError, match=r"\[broker\] must be a table"):
        load_config(DemoConfig, toml_path=path, section="broker")


def test_unknown_override_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown key 'nmae' in overrides"):
        load_config(DemoConfig, overrides={"nmae": "x"})


# ------------------------------------------------------------------------ host:port


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9876", ("127.0.0.1", 9876)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:10911", ("::1", 10911)),
    ],
)
def test_parse_host_port_accepts(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    "text", ["", "9876", ":9876", "host:", "host:x", "host:65536", "::1:9876", "[]:1", "a b:1"]
)
def test_parse_host_port_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_host_port(text)

"""docs/configuration.md is generated from the config dataclasses and kept current."""

from __future__ import annotations

import dataclasses
import importlib.util
import tomllib
from pathlib import Path

import pytest

from pocketmq.broker.config import BrokerConfig
from pocketmq.common.configfile import load_config
from pocketmq.nameserver.config import NamesrvConfig

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_config_docs.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


def test_the_configuration_reference_is_current():
    assert gen.check() is None


@pytest.mark.parametrize(("title", "cls"), [(c[0], c[1]) for c in gen.COMPONENTS])
def test_every_key_says_what_it_does(title, cls):
    silent = [f.name for f in dataclasses.fields(cls) if not gen.help_text(cls, f)]
    assert not silent, f"{title}: give these keys help text (metadata or a comment): {silent}"


def test_the_example_files_in_the_reference_load(tmp_path):
    text = gen.render()
    blocks = text.split("```toml\n")[1:]
    assert len(blocks) == 2
    for block, cls, section in zip(blocks, (BrokerConfig, NamesrvConfig), ("broker", None),
                                   strict=True):
        path = tmp_path / "example.toml"
        path.write_text(block.split("```", 1)[0])
        tomllib.loads(path.read_text())
        load_config(cls, toml_path=str(path), section=section)

"""The one tag-expression parser (common/filter/tags.py) that every layer uses."""

from __future__ import annotations

import argparse
import re

import pytest

from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.pull_processor import subscription_tags
from pocketmq.cli.consume_cmd import UsageError, check_args
from pocketmq.client.consumer_base import parse_subscription
from pocketmq.common.filter import TagExpressionError, parse_tag_expression
from pocketmq.spark.errors import OptionError
from pocketmq.spark.options import tag_set


def test_tag_expressions_parse_like_rocketmqs():
    assert parse_tag_expression("*") is None
    assert parse_tag_expression("") is None
    assert parse_tag_expression(" TagA ||TagB|| ") == frozenset({"TagA", "TagB"})


@pytest.mark.parametrize("expression", [None, "", "   ", "*", " * "])
def test_star_empty_and_blank_expressions_read_every_tag(expression):
    assert parse_tag_expression(expression) is None


def test_an_expression_that_names_no_tag_is_refused_with_the_input_named():
    with pytest.raises(TagExpressionError, match=r"tag expression ' \|\| ' names no tags") as info:
        parse_tag_expression(" || ")
    assert info.value.expression == " || "
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("parse", [parse_subscription, subscription_tags, tag_set])
def test_client_broker_and_spark_read_an_expression_alike(parse):
    assert parse("*") is None
    assert parse(" A||B ") == frozenset({"A", "B"})


def test_each_layer_refuses_an_empty_expression_with_its_own_error():
    with pytest.raises(ValueError, match=re.escape("subscription '||' names no tags")):
        parse_subscription("||")
    with pytest.raises(IllegalArgumentError, match=re.escape("subscription '||' names no tags")):
        subscription_tags("||")
    with pytest.raises(
        OptionError, match=re.escape("option tagExpression is '||', which names no tag")
    ):
        tag_set("||")


def test_the_cli_refuses_an_expr_that_names_no_tag():
    args = argparse.Namespace(
        n=0, idle_timeout=None, peek=True, group=None, json=False, format=None,
        broker=None, queue=None, sql=None, until=None, expr="||",
    )  # fmt: skip
    with pytest.raises(UsageError, match=r"--expr '\|\|' names no tags"):
        check_args(args)

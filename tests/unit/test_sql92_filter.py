"""The SQL92 property filter: RocketMQ's grammar on a table of expressions and messages,
a property-based check against an independent reference evaluator, and errors that
point at the fault."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.common.filter import MessageSelector, SqlFilterError, compile_sql92

# RocketMQ's docs/en/Example_Filter.md: a producer sets "a" to 0..9 and TAGS to TagA..;
# the consumer asks for "TAGS is not null and TAGS in ('TagA', 'TagB') and (a is not
# null and a between 0 and 3)".
ROCKETMQ_EXAMPLE = (
    "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
)

ORDER = {
    "region": "eu",
    "amount": "150",
    "TAGS": "TagA",
    "a": "2",
    "flag": "true",
    "name": "O'Brien",
    "ratio": "0.25",
    "code": "007",
    "word": "abc",
}

TABLE = [
    # the example and RocketMQ's documented ones
    ("region = 'eu' AND amount > 100", ORDER, True),
    ("region = 'eu' AND amount > 200", ORDER, False),
    (ROCKETMQ_EXAMPLE, {"TAGS": "TagA", "a": "3"}, True),
    (ROCKETMQ_EXAMPLE, {"TAGS": "TagB", "a": "0"}, True),
    (ROCKETMQ_EXAMPLE, {"TAGS": "TagC", "a": "1"}, False),
    (ROCKETMQ_EXAMPLE, {"TAGS": "TagA", "a": "4"}, False),
    (ROCKETMQ_EXAMPLE, {"TAGS": "TagA"}, False),
    ("a > 5 AND b = 'abc'", {"a": "6", "b": "abc"}, True),  # Example_Filter.md
    ("a > 5 AND b = 'abc'", {"a": "6", "b": "abd"}, False),
    ("a >= 0 and a <= 3", {"a": "3"}, True),
    # numbers: integers, decimals, exponents, negatives, leading zeros
    ("amount >= 150", ORDER, True),
    ("amount < 150", ORDER, False),
    ("amount <= 150.0", ORDER, True),
    ("ratio > 0.2 AND ratio < 1e0", ORDER, True),
    ("code = 7", ORDER, True),
    ("a > -1", ORDER, True),
    ("a = 2.0", ORDER, True),
    ("word > 1", ORDER, False),  # not a number: UNKNOWN, no match
    ("NOT word > 1", ORDER, False),
    ("amount > a", ORDER, True),  # two properties compare as numbers
    # strings
    ("region <> 'us'", ORDER, True),
    ("region = 'EU'", ORDER, False),  # case matters
    ("name = 'O''Brien'", ORDER, True),
    ("amount = '150'", ORDER, True),
    ("amount = '150.0'", ORDER, False),  # string against string: as strings
    # BETWEEN, NOT BETWEEN
    ("a BETWEEN 2 AND 2", ORDER, True),
    ("a NOT BETWEEN 0 AND 1", ORDER, True),
    ("a NOT BETWEEN 0 AND 3", ORDER, False),
    ("missing NOT BETWEEN 0 AND 3", ORDER, False),
    # IN, NOT IN
    ("region IN ('us', 'eu')", ORDER, True),
    ("region NOT IN ('us', 'eu')", ORDER, False),
    ("missing NOT IN ('x')", ORDER, False),
    # IS [NOT] NULL
    ("missing IS NULL", ORDER, True),
    ("region IS NULL", ORDER, False),
    ("region IS NOT NULL", ORDER, True),
    # an absent property makes a comparison false, and its negation false too
    ("missing = 'x'", ORDER, False),
    ("missing <> 'x'", ORDER, False),
    ("NOT missing = 'x'", ORDER, False),
    ("missing > 1 OR region = 'eu'", ORDER, True),
    ("missing > 1 AND region = 'eu'", ORDER, False),
    ("NOT (missing > 1 AND region = 'us')", ORDER, True),  # UNKNOWN AND FALSE = FALSE
    # booleans and logic
    ("flag = TRUE", ORDER, True),
    ("flag = FALSE", ORDER, False),
    ("TRUE", {}, True),
    ("FALSE OR TRUE", {}, True),
    ("NOT FALSE AND NOT NOT TRUE", {}, True),
    ("(region = 'us' OR region = 'eu') AND (a = 1 OR a = 2)", ORDER, True),
    ("region = 'us' OR region = 'eu' AND a = 1", ORDER, False),  # AND binds tighter
    ("region='eu'AND(a>1)", ORDER, True),
    ("region = 'eu'\n  and a > 1", ORDER, True),
    ("RegIon = 'eu'", ORDER, False),  # property names are case-sensitive
    ("region = 'eu' and A IS NULL", ORDER, True),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), TABLE)
def test_expression_matches_message_as_rocketmq_does(expression, properties, expected):
    assert compile_sql92(expression).matches(properties) is expected


BAD = [
    ("(a > 1", 1, 7, "expected ')' to close the '(' at column 1"),
    ("region = 'eu' AND (amount > 100", 1, 32, "expected ')'"),
    ("a > 'x'", 1, 5, "cannot be compared"),
    ("a BETWEEN 'x' AND 3", 1, 11, "BETWEEN compares numbers"),
    ("a = NULL", 1, 5, "IS NULL"),
    ("a BETWEEN 5 AND 1", 1, 11, "lower bound comes first"),
    ("a IN (1, 2)", 1, 7, "string literals"),
    ("a IN ('x' 'y')", 1, 11, "expected ',' or ')'"),
    ("'x' IN ('x')", 1, 1, "property name before IN"),
    ("a != 1", 1, 3, "write '<>'"),
    ("a = 'abc", 1, 5, "not closed"),
    ("a > 1 b", 1, 7, "expected AND, OR or the end"),
    ("a", 1, 2, "expected a comparison"),
    ("a IS", 1, 5, "NULL after IS"),
    ("a NOT LIKE 'x'", 1, 7, "BETWEEN or IN after NOT"),
    ("a = 1 AND", 1, 10, "found end of expression"),
    ("a = 1 #", 1, 7, "unexpected character '#'"),
    ("a = 1 AND\n  b >> 2", 2, 6, "expected a property name"),
    ("", 1, 1, "empty"),
    ("x" * 5000, 1, 1, "at most 4096"),
    ("NOT " * 200 + "a = 1", 1, 405, "deeper than 100"),
    ("(" * 150 + "a = 1" + ")" * 150, 1, 102, "deeper than 100"),
    (" OR ".join(["a = 1"] * 300), 1, 2305, "more than 256 predicates"),
]


@pytest.mark.parametrize(("expression", "line", "column", "words"), BAD)
def test_bad_expression_is_refused_with_its_position(expression, line, column, words):
    with pytest.raises(SqlFilterError) as err:
        compile_sql92(expression)
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    assert words in str(err.value)
    assert str(err.value).startswith(f"line {line}, column {column}: ")


def test_selector_compiles_sql_at_construction_and_a_plain_string_means_tags():
    assert MessageSelector.of(" TagA || TagB ") == MessageSelector.by_tag("TagA || TagB")
    assert MessageSelector.of(None) == MessageSelector.by_tag("*")
    assert MessageSelector.by_sql("a > 1").is_sql
    with pytest.raises(SqlFilterError, match="line 1, column 4"):
        MessageSelector.by_sql("a >")


# -- property-based: the compiled closure tree against a naive reference evaluator ------
NAMES = ["a", "b", "c"]
VALUES = st.one_of(st.integers(-5, 5).map(str), st.sampled_from(["x", "y", "1.5", "true"]))
PROPS = st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=3)


def _num(v):
    try:
        return float(v) if v is not None and not isinstance(v, bool) else None
    except ValueError:
        return None


def _ref(tree, props):
    """Evaluate *tree* (tuples) with SQL's three-valued logic; None is UNKNOWN."""
    op = tree[0]
    if op == "and":
        lv, rv = _ref(tree[1], props), _ref(tree[2], props)
        return False if False in (lv, rv) else (None if None in (lv, rv) else True)
    if op == "or":
        lv, rv = _ref(tree[1], props), _ref(tree[2], props)
        return True if True in (lv, rv) else (None if None in (lv, rv) else False)
    if op == "not":
        v = _ref(tree[1], props)
        return None if v is None else not v
    if op == "null":
        return (tree[1] not in props) != tree[2]
    value = props.get(tree[1])
    if value is None:
        return None
    if op == "in":
        inside = value in tree[2]
        return inside != tree[3]
    if op == "streq":
        return (value == tree[2]) != tree[3]
    n = _num(value)
    if n is None:
        return None
    if op == "between":
        inside = tree[2] <= n <= tree[3]
        return inside != tree[4]
    c = tree[2]
    return {"=": n == c, "<>": n != c, ">": n > c, ">=": n >= c, "<": n < c, "<=": n <= c}[op]


def _sql(tree):
    op = tree[0]
    if op in ("and", "or"):
        return f"({_sql(tree[1])} {op.upper()} {_sql(tree[2])})"
    if op == "not":
        return f"NOT ({_sql(tree[1])})"
    if op == "null":
        return f"{tree[1]} IS {'NOT ' if tree[2] else ''}NULL"
    if op == "in":
        items = ", ".join(f"'{v}'" for v in tree[2])
        return f"{tree[1]} {'NOT ' if tree[3] else ''}IN ({items})"
    if op == "streq":
        return f"{tree[1]} {'<>' if tree[3] else '='} '{tree[2]}'"
    if op == "between":
        return f"{tree[1]} {'NOT ' if tree[4] else ''}BETWEEN {tree[2]} AND {tree[3]}"
    return f"{tree[1]} {op} {tree[2]}"


names = st.sampled_from(NAMES)
numbers = st.integers(-5, 5)
leaves = st.one_of(
    st.tuples(st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), names, numbers),
    st.tuples(st.just("between"), names, numbers, numbers, st.booleans()).map(
        lambda t: (t[0], t[1], min(t[2], t[3]), max(t[2], t[3]), t[4])
    ),
    st.tuples(
        st.just("in"),
        names,
        st.lists(st.sampled_from(["x", "y", "1"]), min_size=1, max_size=3),
        st.booleans(),
    ),
    st.tuples(st.just("streq"), names, st.sampled_from(["x", "y", "1"]), st.booleans()),
    st.tuples(st.just("null"), names, st.booleans()),
)
trees = st.recursive(
    leaves,
    lambda sub: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), sub, sub), st.tuples(st.just("not"), sub)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(tree=trees, props=PROPS)
def test_compiled_filter_agrees_with_a_reference_evaluator(tree, props):
    compiled = compile_sql92(_sql(tree))
    assert compiled.evaluate(props) == _ref(tree, props)

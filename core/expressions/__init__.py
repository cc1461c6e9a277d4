"""DynamoDB's expression language: condition, filter, update, projection and key condition.

Every request that carries an expression passes through this package, in the router (to reject a
bad request with DynamoDB's exact message before it leaves the front door) and again in the storage
node (to evaluate it atomically with the write). The facade below is all either needs::

    condition(text, names, values, kind="ConditionExpression" | "FilterExpression")
        -> Condition      .evaluate(item | None) -> bool, .top_level_attributes
    update(text, names, values)
        -> Update         .apply(item) -> new item, .top_level_attributes, .paths,
                          .returned_attributes(old, new, return_values)
    projection(text, names)
        -> Projection     .apply(item) -> projected item
    key_condition(text, names, values, hash_key, range_key, hash_type=, range_type=)
        -> KeyCondition   .hash_value, .range (RangeCondition | None)
    index_key_condition(text, names, values, key_shape)   -- a multi-attribute global index key
        -> KeyCondition   .hash_value, .fixed (the further equalities), .range_key, .range
    RangeCondition(op, values), RangeCondition.from_json({"op", "values"}), .matches(value)
    check_unused(names, values, *compiled)  -- DynamoDB's "unused placeholder" errors for a request
    check_attribute_maps(names, values)     -- the checks DynamoDB makes on the two maps up front
    parse_cached(grammar, text)             -- syntax alone: a parse, or DynamoDB's message

Every compiled object has ``names_used`` and ``values_used``, the placeholders its text mentions.
``names`` and ``values`` are the request's ExpressionAttributeNames and ExpressionAttributeValues
as received (``values`` in wire JSON, validated with ``core.values.validate_value``); either may
be None. Every mistake a client can make raises ``core.errors.ValidationError`` with DynamoDB's
message; a value of the wrong JSON shape raises ``SerializationError``.

Why a hand-written tokenizer and parser. The language is small (four grammars
sharing paths and operands, about thirty productions), and what clients depend on is less the
grammar than DynamoDB's behaviour around it: the exact "Syntax error; token: ..., near: ..." text,
which needs each token's offsets; a parenthesised group that may be a condition or an operand;
doubled parentheses rejected as redundant; and a fixed ranking among a dozen semantic errors. A
parser generator (Lark, pyparsing, PEG tools) would add a dependency and still need all of that
written around it, would word syntax errors its own way, and is several times slower in pure
Python. The hand-written parser is a few hundred lines that read like the Developer Guide's
grammar (its nesting kept on explicit stacks, since DynamoDB allows any nesting that fits 4 KB and
300 operators), tokenizes with one compiled regular expression, and its output (frozen, hashable
trees) is cached per distinct text with a bounded ``functools.lru_cache`` (conditions also cache
the plan of checks DynamoDB makes), so a request whose expression was seen before skips parsing
altogether.
Binding to the request's placeholders then compiles the tree into closures, one per node,
specialised for the common comparison of an attribute with a constant, so evaluating a filter
against each item of a Scan costs a handful of Python calls.

Module map: `tokens` (tokenizer, syntax-error text), `parser` (grammars), `ast` (trees and
rendering back to text), `binding` (placeholders and DynamoDB's error ranking), `condition`,
`update`, `projection` and `keycondition` (checks and evaluation per kind), `document` (reading
and projecting paths), `reserved` (DynamoDB's reserved words) and `legacy` (Expected,
AttributeUpdates, AttributesToGet, KeyConditions, QueryFilter and ScanFilter translated into
expressions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, cast

from core import limits
from core.errors import SerializationError, ValidationError
from core.expressions import ast
from core.expressions.binding import (
    CONDITION_RANKS,
    ORDER,
    PROJECTION_RANKS,
    UPDATE_RANKS,
    Binder,
    ResolvedPath,
    check_names_map,
    check_values_map,
)
from core.expressions.condition import (
    ConditionPlan,
    Predicate,
    compile_condition,
    plan_condition,
)
from core.expressions.document import project
from core.expressions.keycondition import (
    KeyTests,
    RangeCondition,
    check_key_form,
    index_key_tests,
    key_tests,
)
from core.expressions.parser import (
    ExpressionSyntaxError,
    Parsed,
    parse_condition,
    parse_projection,
    parse_update,
)
from core.expressions.projection import check_projection
from core.expressions.update import (
    INCORRECT_TYPE,
    LEGACY_MISMATCH,
    check_update,
    compile_update,
)
from core.keys import KeyShape
from core.values import AttributeValue, Item

__all__ = [
    "RETURN_VALUES",
    "Condition",
    "KeyCondition",
    "Projection",
    "RangeCondition",
    "Update",
    "check_attribute_maps",
    "check_unused",
    "clear_caches",
    "condition",
    "condition_plan",
    "index_key_condition",
    "index_key_condition_of",
    "key_condition",
    "parse_cached",
    "projection",
    "update",
]

RETURN_VALUES = ("NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW")
_EMPTY_ITEM: Item = {}
_GRAMMARS: dict[str, Callable[[str], Parsed]] = {
    "condition": parse_condition,
    "update": parse_update,
    "projection": parse_projection,
}


@lru_cache(maxsize=limits.EXPRESSION_PARSE_CACHE_ENTRIES)
def parse_cached(grammar: str, text: str) -> Parsed | str:
    """The parse of ``text`` with one of the grammars, or DynamoDB's message for why it fails.

    Failures are cached too (as their message), so a client repeating a broken expression costs a
    dictionary lookup. The message lacks the "Invalid <kind>: " prefix, which depends on the
    parameter the text came in.
    """
    if not text:
        return "The expression can not be empty;"
    # A character takes at most 4 bytes in UTF-8, so only long texts need encoding to be measured.
    if len(text) * 4 > limits.EXPRESSION_BYTES_MAX:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limits.EXPRESSION_BYTES_MAX:
            return f"Expression size has exceeded the maximum allowed size; expression size: {size}"
    try:
        return _GRAMMARS[grammar](text)
    except ExpressionSyntaxError as error:
        return error.message


@lru_cache(maxsize=limits.EXPRESSION_PARSE_CACHE_ENTRIES)
def condition_plan(text: str) -> ConditionPlan | str:
    """The checking plan of a condition text (see ``condition.plan_condition``), or why it fails."""
    parsed = parse_cached("condition", text)
    if isinstance(parsed, str):
        return parsed
    return plan_condition(parsed)


def clear_caches() -> None:
    """Forget every cached parse (for benchmarks and tests that measure cold parsing)."""
    parse_cached.cache_clear()
    condition_plan.cache_clear()


def _planned(text: Any, kind: str) -> tuple[Parsed, ConditionPlan]:
    if not isinstance(text, str):
        raise SerializationError(f"{kind} must be a string")
    plan = condition_plan(text)
    if isinstance(plan, str):
        raise ValidationError(f"Invalid {kind}: {plan}")
    return plan.parsed, plan


def _parsed(grammar: str, text: Any, kind: str) -> Parsed:
    if not isinstance(text, str):
        raise SerializationError(f"{kind} must be a string")
    result = parse_cached(grammar, text)
    if isinstance(result, str):
        raise ValidationError(f"Invalid {kind}: {result}")
    return result


def _check_map_shapes(names: Any, values: Any) -> None:
    # Plain dicts (what JSON decoding produces) skip the slower abstract-class checks.
    if type(names) is dict and type(values) is dict:
        return
    if names is not None and not isinstance(names, Mapping):
        raise SerializationError("ExpressionAttributeNames must be a map of strings")
    if values is not None and not isinstance(values, Mapping):
        raise SerializationError("ExpressionAttributeValues must be a map of attribute values")


class Compiled(Protocol):
    names_used: frozenset[str]
    values_used: frozenset[str]


class Condition:
    """A checked ConditionExpression or FilterExpression, compiled for evaluation."""

    __slots__ = ("_paths", "_predicate", "kind", "names_used", "text", "tree", "values_used")

    def __init__(self, text: str, kind: str, plan: ConditionPlan, binder: Binder) -> None:
        parsed = plan.parsed
        self.text = text
        self.kind = kind
        self.tree = cast(ast.Condition, parsed.tree)
        self.names_used = parsed.names_used
        self.values_used = parsed.values_used
        self._paths = binder.paths
        self._predicate: Predicate = compile_condition(plan.program, binder)

    @property
    def top_level_attributes(self) -> frozenset[str]:
        """The top-level attributes the condition reads (a Query filter may not read a key)."""
        return frozenset(str(path[0]) for path in self._paths.values())

    @property
    def nested_attributes(self) -> frozenset[str]:
        """The top-level attributes the condition reads through a document path (`a.b`, `a[0]`)."""
        return frozenset(str(path[0]) for path in self._paths.values() if len(path) > 1)

    def evaluate(self, item: Item | None) -> bool:
        """Whether ``item`` satisfies the condition; None means there is no item."""
        return self._predicate(item if item is not None else _EMPTY_ITEM)


class Update:
    """A checked UpdateExpression, compiled for application."""

    __slots__ = (
        "_apply",
        "names_used",
        "only_removes",
        "paths",
        "text",
        "top_level_attributes",
        "tree",
        "values_used",
    )

    def __init__(
        self,
        text: str,
        parsed: Parsed,
        binder: Binder,
        paths: list[ResolvedPath],
        mismatch: str = INCORRECT_TYPE,
    ) -> None:
        assert isinstance(parsed.tree, ast.UpdateExpression)
        self.text = text
        self.tree = parsed.tree
        self.names_used = parsed.names_used
        self.values_used = parsed.values_used
        # The document paths the update writes, in the order written.
        self.paths: tuple[ResolvedPath, ...] = tuple(paths)
        # Top-level attributes written; the node rejects an update touching a key attribute
        # ("Cannot update attribute pk. This attribute is part of the key").
        self.top_level_attributes = frozenset(str(path[0]) for path in paths)
        # Whether every action takes something away (REMOVE, DELETE from a set): such an update
        # leaves a missing item missing instead of creating it from its key.
        self.only_removes = all(
            clause.keyword in ("REMOVE", "DELETE") for clause in parsed.tree.clauses
        )
        self._apply = compile_update(parsed.tree, binder, mismatch)

    def apply(self, item: Item) -> Item:
        """The item after the update; ``item`` is not modified. Raises DynamoDB's runtime errors."""
        return self._apply(item)

    def returned_attributes(
        self, old: Item | None, new: Item | None, return_values: str
    ) -> Item | None:
        """What UpdateItem returns as ``Attributes`` for ``return_values``; None for nothing.

        UPDATED_OLD and UPDATED_NEW return the updated document paths, projected out of the old or
        new item as a ProjectionExpression would (``SET a.b = :v`` returns ``{"a": {"M": {"b":
        ...}}}``, not all of ``a``), which is what DynamoDB returns.
        """
        if return_values not in RETURN_VALUES:
            raise ValidationError(
                f"1 validation error detected: Value '{return_values}' at 'returnValues' failed "
                "to satisfy constraint: Member must satisfy enum value set: "
                "[ALL_NEW, UPDATED_OLD, ALL_OLD, NONE, UPDATED_NEW]"
            )
        if return_values == "NONE":
            return None
        source = old if return_values in ("ALL_OLD", "UPDATED_OLD") else new
        if not source:
            return None
        if return_values.startswith("ALL_"):
            return source
        return project(source, self.paths) or None


class Projection:
    """A checked ProjectionExpression."""

    __slots__ = (
        "names_used",
        "nested_attributes",
        "paths",
        "text",
        "top_level_attributes",
        "tree",
        "values_used",
    )

    def __init__(self, text: str, parsed: Parsed, paths: list[ResolvedPath]) -> None:
        assert isinstance(parsed.tree, ast.ProjectionExpression)
        self.text = text
        self.tree = parsed.tree
        self.names_used = parsed.names_used
        self.values_used: frozenset[str] = frozenset()
        self.paths: tuple[ResolvedPath, ...] = tuple(paths)
        self.top_level_attributes = frozenset(str(path[0]) for path in paths)
        # Top-level attributes projected through a document path (`a.b`, `a[0]`).
        self.nested_attributes = frozenset(str(path[0]) for path in paths if len(path) > 1)

    def apply(self, item: Item) -> Item:
        return project(item, self.paths)


class KeyCondition:
    """A checked KeyConditionExpression: the partition key value and the sort key condition.

    On a key of several partition key or sort key attributes, `hash_value` is the first partition
    key attribute's, `fixed` the values of the key attributes after it that the condition fixes by
    equality (in key order) and `range` the condition on the next one, `range_key`. On any other
    key `fixed` is empty and `range_key` the sort key.
    """

    __slots__ = (
        "fixed",
        "hash_key",
        "hash_value",
        "names_used",
        "range",
        "range_key",
        "text",
        "values_used",
    )

    def __init__(
        self,
        text: str,
        parsed: Parsed,
        hash_key: str,
        range_key: str | None,
        hash_value: AttributeValue,
        range_condition: RangeCondition | None,
        fixed: tuple[AttributeValue, ...] = (),
    ) -> None:
        self.text = text
        self.fixed = fixed
        self.names_used = parsed.names_used
        self.values_used = parsed.values_used
        self.hash_key = hash_key
        self.range_key = range_key
        self.hash_value = hash_value
        self.range = range_condition


def condition(
    text: str,
    names: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    *,
    kind: str = "ConditionExpression",
) -> Condition:
    """Check and compile a condition; ``kind`` names its parameter (or "FilterExpression")."""
    parsed, plan = _planned(text, kind)
    _check_map_shapes(names, values)
    binder = Binder(kind, CONDITION_RANKS, names, values)
    plan.bind(binder)
    binder.raise_first(parsed.findings)
    return Condition(text, kind, plan, binder)


def update(
    text: str,
    names: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
    *,
    legacy: bool = False,
) -> Update:
    """Check and compile an UpdateExpression; `legacy` when it translates AttributeUpdates, whose
    ADD and DELETE of another type than the attribute's DynamoDB calls a "Type mismatch"."""
    parsed = _parsed("update", text, "UpdateExpression")
    _check_map_shapes(names, values)
    binder = Binder("UpdateExpression", UPDATE_RANKS, names, values)
    assert isinstance(parsed.tree, ast.UpdateExpression)
    paths = check_update(parsed.tree, binder)
    binder.raise_first(parsed.findings)
    return Update(text, parsed, binder, paths, LEGACY_MISMATCH if legacy else INCORRECT_TYPE)


def projection(text: str, names: Mapping[str, Any] | None = None) -> Projection:
    """Check a ProjectionExpression."""
    parsed = _parsed("projection", text, "ProjectionExpression")
    _check_map_shapes(names, None)
    binder = Binder("ProjectionExpression", PROJECTION_RANKS, names, None)
    assert isinstance(parsed.tree, ast.ProjectionExpression)
    paths = check_projection(parsed.tree, binder)
    binder.raise_first(parsed.findings)
    return Projection(text, parsed, paths)


@dataclass(frozen=True)
class KeyConditionForm:
    """A KeyConditionExpression checked as far as no key schema is needed: its placeholders bound
    and its form allowed. `key_condition_of` finishes the check once the table is known."""

    text: str
    parsed: Parsed
    tests: KeyTests


def check_key_condition_form(
    text: str, names: Mapping[str, Any] | None, values: Mapping[str, Any] | None
) -> KeyConditionForm:
    """Check the part of a KeyConditionExpression that needs no key schema (see check_key_form)."""
    kind = "KeyConditionExpression"
    parsed, plan = _planned(text, kind)
    _check_map_shapes(names, values)
    binder = Binder(kind, CONDITION_RANKS, names, values)
    plan.bind(binder)
    binder.raise_first(parsed.findings)
    return KeyConditionForm(text, parsed, check_key_form(plan.tree, binder))


def key_condition_of(
    form: KeyConditionForm,
    hash_key: str,
    range_key: str | None,
    *,
    hash_type: str | None = None,
    range_type: str | None = None,
) -> KeyCondition:
    """A checked form held against a key schema (types: "S", "N" or "B", if known)."""
    hash_value, range_condition = key_tests(form.tests, hash_key, range_key, hash_type, range_type)
    return KeyCondition(form.text, form.parsed, hash_key, range_key, hash_value, range_condition)


def index_key_condition_of(form: KeyConditionForm, key_shape: KeyShape) -> KeyCondition:
    """A checked form held against a global index's own key of several partition key or sort key
    attributes (`core.expressions.keycondition.index_key_tests`)."""
    partition = [(a.name, a.type) for a in key_shape.partition_attributes]
    sort = [(a.name, a.type) for a in key_shape.attributes[key_shape.hashed :]]
    tested = index_key_tests(form.tests, partition, sort)
    return KeyCondition(
        form.text,
        form.parsed,
        partition[0][0],
        tested.range_key,
        tested.fixed[0],
        tested.range,
        tested.fixed[1:],
    )


def index_key_condition(
    text: str,
    names: Mapping[str, Any] | None,
    values: Mapping[str, Any] | None,
    key_shape: KeyShape,
) -> KeyCondition:
    """Check a KeyConditionExpression (or the translation of KeyConditions) against a global
    index's own key of several partition key or sort key attributes."""
    return index_key_condition_of(_key_condition_form(text, names, values), key_shape)


def _key_condition_form(
    text: str, names: Mapping[str, Any] | None, values: Mapping[str, Any] | None
) -> KeyConditionForm:
    kind = "KeyConditionExpression"
    parsed, plan = _planned(text, kind)
    _check_map_shapes(names, values)
    binder = Binder(kind, CONDITION_RANKS, names, values)
    plan.bind(binder)
    # A key condition words an unordered operand its own way ("ComparisonOperator LT is not valid
    # for BOOL AttributeValue type"), in `key_tests`.
    binder.findings = [finding for finding in binder.findings if finding.category != ORDER]
    binder.raise_first(parsed.findings)
    return KeyConditionForm(text, parsed, check_key_form(plan.tree, binder))


def key_condition(
    text: str,
    names: Mapping[str, Any] | None,
    values: Mapping[str, Any] | None,
    hash_key: str,
    range_key: str | None,
    *,
    hash_type: str | None = None,
    range_type: str | None = None,
) -> KeyCondition:
    """Check a KeyConditionExpression against a key schema (types: "S", "N" or "B", if known)."""
    form = _key_condition_form(text, names, values)
    return key_condition_of(form, hash_key, range_key, hash_type=hash_type, range_type=range_type)


def check_unused(
    names: Mapping[str, Any] | None, values: Mapping[str, Any] | None, *compiled: Compiled
) -> None:
    """Reject placeholders that none of a request's expressions uses, as DynamoDB does."""
    if names:
        used = frozenset().union(*(c.names_used for c in compiled))
        unused = [key for key in names if key not in used]
        if unused:
            raise ValidationError(
                "Value provided in ExpressionAttributeNames unused in expressions: "
                f"keys: {{{', '.join(unused)}}}"
            )
    if values:
        used = frozenset().union(*(c.values_used for c in compiled))
        unused = [key for key in values if key not in used]
        if unused:
            raise ValidationError(
                "Value provided in ExpressionAttributeValues unused in expressions: "
                f"keys: {{{', '.join(unused)}}}"
            )


def check_attribute_maps(
    names: Mapping[str, Any] | None, values: Mapping[str, Any] | None
) -> dict[str, AttributeValue]:
    """DynamoDB's checks of the two maps before any expression is parsed; returns values normalised.

    Both must be non-empty when given ("ExpressionAttributeNames must not be empty"), keys must be
    ``#name`` / ``:name`` placeholders, names non-empty strings and values valid attribute values.
    """
    check_names_map(names)
    return check_values_map(values)

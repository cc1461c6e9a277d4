"""Binding a parsed expression to its ExpressionAttributeNames and ExpressionAttributeValues.

A ``Binder`` resolves ``#name`` placeholders into attribute names and validates the ``:value``
placeholders an expression uses (values arrive as raw wire JSON), and collects every problem the
expression has as a ranked finding. DynamoDB checks an expression completely and then reports one
problem, the first in a fixed order that differs per expression kind (a reserved word outranks an
undefined placeholder in a condition, an unknown function outranks a repeated clause in an update,
and so on); ``Binder.raise_first`` applies that order, so a request with several mistakes gets the
message DynamoDB would give, prefixed with "Invalid <ExpressionKind>: ".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from core import limits
from core.errors import SerializationError, ValidationError
from core.expressions import ast
from core.expressions.parser import LIMIT, PARENS, RESERVED, SECTION, Deferred
from core.values import AttributeValue, normalize_number, validate_value

ResolvedPath = tuple[str | int, ...]

UNKNOWN_FUNCTION = "unknown_function"
MISUSED_FUNCTION = "misused_function"
UNDEFINED_NAME = "undefined_name"
UNDEFINED_VALUE = "undefined_value"
ARITY = "arity"
DISTINCT = "distinct"
FUNCTION = "function"
ORDER = "order"  # An unordered constant compared with <, <=, >, >= or BETWEEN.
OVERLAP = "overlap"
CONFLICT = "conflict"
OPERAND = "operand"


def _ranks(*groups: Iterable[str]) -> dict[str, int]:
    return {category: rank for rank, group in enumerate(groups) for category in group}


# The order in which DynamoDB reports the problems of each expression kind (categories in one group
# are reported in the order they occur in the text).
CONDITION_RANKS = _ranks(
    [LIMIT],
    [PARENS],
    [UNKNOWN_FUNCTION],
    [MISUSED_FUNCTION],
    [RESERVED],
    [UNDEFINED_NAME, UNDEFINED_VALUE],
    [ARITY],
    [DISTINCT],
    [FUNCTION, ORDER],
)
UPDATE_RANKS = _ranks(
    [LIMIT],
    [RESERVED],
    [UNKNOWN_FUNCTION],
    [SECTION],
    [UNDEFINED_NAME],
    [UNDEFINED_VALUE],
    [OVERLAP],
    [CONFLICT],
    [OPERAND],
    [ARITY, FUNCTION],
)
PROJECTION_RANKS = _ranks([LIMIT], [RESERVED], [UNDEFINED_NAME], [OVERLAP], [CONFLICT])

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def describe_path(path: ResolvedPath) -> str:
    """A resolved path as DynamoDB prints it in messages: ``[a, b, [0]]``."""
    return "[" + ", ".join(f"[{e}]" if isinstance(e, int) else e for e in path) + "]"


def describe_value(value: AttributeValue) -> str:
    """A value as DynamoDB prints it in messages: ``AttributeValue: {S:abc}``."""
    ((tag, raw),) = value.items()
    return f"AttributeValue: {{{tag}:{raw}}}"


def check_names_map(names: Mapping[str, Any] | None) -> None:
    """Validate ExpressionAttributeNames as a whole, as DynamoDB does before parsing anything."""
    if names is None:
        return
    if not isinstance(names, Mapping):
        raise SerializationError("ExpressionAttributeNames must be a map of strings")
    if not names:
        raise ValidationError("ExpressionAttributeNames must not be empty")
    for key, name in names.items():
        if isinstance(key, str) and len(key.encode()) > limits.EXPRESSION_ATTRIBUTE_NAME_BYTES_MAX:
            raise ValidationError(
                "ExpressionAttributeNames contains invalid key: The expression attribute map "
                f"contains a key that is too long; size of key: {len(key.encode())}"
            )
        if not _is_placeholder(key, "#"):
            raise ValidationError(
                f'ExpressionAttributeNames contains invalid key: Syntax error; key: "{key}"'
            )
        _check_name_value(key, name)


def check_values_map(values: Mapping[str, Any] | None) -> dict[str, AttributeValue]:
    """Validate ExpressionAttributeValues as a whole and return them normalised."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise SerializationError("ExpressionAttributeValues must be a map of attribute values")
    if not values:
        raise ValidationError("ExpressionAttributeValues must not be empty")
    for key in values:
        if not _is_placeholder(key, ":"):
            raise ValidationError(
                f'ExpressionAttributeValues contains invalid key: Syntax error; key: "{key}"'
            )
    return {key: _validated(key, raw) for key, raw in values.items()}


def _is_placeholder(key: Any, sigil: str) -> bool:
    return (
        isinstance(key, str)
        and len(key) > 1
        and key[0] == sigil
        and all(c in _NAME_CHARS for c in key[1:])
    )


def _check_name_value(key: str, name: Any) -> str:
    if not isinstance(name, str):
        raise SerializationError(f"ExpressionAttributeNames value for {key} must be a string")
    if not name:
        raise ValidationError(
            f"ExpressionAttributeNames contains invalid value: Empty attribute name for key {key}"
        )
    return name


@lru_cache(maxsize=limits.EXPRESSION_NUMBER_CACHE_ENTRIES)
def _canonical_number(text: str) -> str:
    return normalize_number(text)


def _validated(key: str, raw: Any) -> AttributeValue:
    try:
        # A short number takes the memoised path; it is exactly what validate_value does for it.
        if type(raw) is dict and len(raw) == 1:
            number = raw.get("N")
            if type(number) is str and len(number) <= limits.EXPRESSION_NUMBER_CACHE_TEXT_CHARS_MAX:
                return {"N": _canonical_number(number)}
        return validate_value(raw, where=key)
    except ValidationError as error:
        raise ValidationError(
            f"ExpressionAttributeValues contains invalid value: {error.message} for key {key}"
        ) from None


class Binder:
    """Resolves placeholders for one expression and collects its ranked findings."""

    def __init__(
        self,
        kind: str,
        ranks: dict[str, int],
        names: Mapping[str, Any] | None,
        values: Mapping[str, Any] | None,
    ) -> None:
        self.kind = kind
        self.ranks = ranks
        self.names = names
        self.raw_values = values
        self.findings: list[Deferred] = []
        self.paths: dict[ast.Path, ResolvedPath] = {}
        self.values: dict[str, AttributeValue] = {}

    def note(self, category: str, message: str) -> None:
        self.findings.append(Deferred(category, message))

    def path(self, path: ast.Path) -> ResolvedPath | None:
        """The path with its placeholders resolved, or None (and a finding) if one is undefined."""
        resolved = self.paths.get(path)
        if resolved is not None:
            return resolved
        elements: list[str | int] = []
        for element in path:
            if isinstance(element, str) and element[0] == "#":
                name = self.names.get(element) if self.names is not None else None
                if name is None:
                    self.note(
                        UNDEFINED_NAME,
                        "An expression attribute name used in the document path is not defined; "
                        f"attribute name: {element}",
                    )
                    return None
                elements.append(_check_name_value(element, name))
            else:
                elements.append(element)
        resolved = tuple(elements)
        self.paths[path] = resolved
        return resolved

    def value(self, placeholder: str) -> AttributeValue | None:
        """The validated value of a placeholder, or None (and a finding) if it is undefined."""
        value = self.values.get(placeholder)
        if value is not None:
            return value
        raw = self.raw_values.get(placeholder) if self.raw_values is not None else None
        if raw is None:
            self.note(
                UNDEFINED_VALUE,
                "An expression attribute value used in expression is not defined; "
                f"attribute value: {placeholder}",
            )
            return None
        value = _validated(placeholder, raw)
        self.values[placeholder] = value
        return value

    def raise_first(self, parsed: tuple[Deferred, ...]) -> None:
        """Raise DynamoDB's error for the first-ranked finding, if there is any."""
        findings = [*parsed, *self.findings]
        if not findings:
            return
        first = min(range(len(findings)), key=lambda i: (self.ranks[findings[i].category], i))
        raise ValidationError(f"Invalid {self.kind}: {findings[first].message}")

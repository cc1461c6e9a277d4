"""PartiQL statements as frozen trees, and their rendering back to PartiQL text.

The parser builds these; the planner reads them. Values are kept as written (a literal is already
an AttributeValue in wire JSON; a parameter is its number among the statement's `?`), so a tree
is independent of any request's Parameters and can be cached per statement text. `render`
writes a tree back as PartiQL that parses to the same tree, which the property tests rely on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.partiql.tokens import Token

AttributeValue = dict[str, Any]


# Values ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Literal:
    """A scalar literal: a string, number, boolean or NULL, as an AttributeValue."""

    value: tuple[str, Any]  # (type, value), e.g. ("S", "x"), hashable unlike the wire dict

    def attribute_value(self) -> AttributeValue:
        return {self.value[0]: self.value[1]}


@dataclasses.dataclass(frozen=True, slots=True)
class Missing:
    """`MISSING`: no value at all (an attribute that is absent)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Parameter:
    """`?`: the `number`th (from 0) of the request's Parameters."""

    number: int


@dataclasses.dataclass(frozen=True, slots=True)
class ListValue:
    """`[v, ...]`: a list (L)."""

    items: tuple[Value, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class MapValue:
    """`{'k': v, ...}`: a map (M); an entry whose value is MISSING is left out."""

    entries: tuple[tuple[str, Value], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SetValue:
    """`<<v, ...>>`: a set (SS, NS or BS, by its members' type)."""

    items: tuple[Value, ...]
    token: Token = dataclasses.field(compare=False)  # the `<<`: where a mixed set is


Value = Literal | Missing | Parameter | ListValue | MapValue | SetValue


# Paths and operands ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Path:
    """A document path: an attribute name, then map keys (str) and list indexes (int)."""

    elements: tuple[str | int, ...]
    token: Token = dataclasses.field(compare=False)  # the first token: where a fault is

    @property
    def name(self) -> str:
        first = self.elements[0]
        assert isinstance(first, str)
        return first

    @property
    def is_attribute(self) -> bool:
        """Whether the path is a top-level attribute alone (`pk`, not `pk.a` or `pk[0]`)."""
        return len(self.elements) == 1


@dataclasses.dataclass(frozen=True, slots=True)
class Size:
    """`size(path)`."""

    path: Path


Operand = Path | Size | Value


# Conditions ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Comparison:
    op: str  # one of = <> < <= > >= (`!=` is read as `<>`)
    left: Operand
    right: Operand


@dataclasses.dataclass(frozen=True, slots=True)
class Between:
    operand: Operand
    low: Operand
    high: Operand


@dataclasses.dataclass(frozen=True, slots=True)
class In:
    operand: Operand
    values: tuple[Operand, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Is:
    """`path IS [NOT] MISSING` or `path IS [NOT] NULL`."""

    path: Path
    what: str  # "MISSING" or "NULL"
    negated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Function:
    """A boolean function: begins_with, contains or attribute_type (names in lower case)."""

    name: str
    path: Path
    argument: Operand


@dataclasses.dataclass(frozen=True, slots=True)
class And:
    items: tuple[Condition, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Condition, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Not:
    item: Condition


Condition = Comparison | Between | In | Is | Function | And | Or | Not


def conjuncts(condition: Condition | None) -> list[Condition]:
    """The conditions a WHERE clause ANDs together at its top level."""
    if condition is None:
        return []
    if isinstance(condition, And):
        return [c for item in condition.items for c in conjuncts(item)]
    return [condition]


# Updates ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Arithmetic:
    """`a + b` or `a - b` on the right of a SET."""

    op: str
    left: Path | Value
    right: Path | Value


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """list_append(a, b), set_add(path, set) or set_delete(path, set) on the right of a SET."""

    name: str  # in lower case
    arguments: tuple[Path | Value, ...]
    token: Token = dataclasses.field(compare=False)


SetSource = Path | Value | Arithmetic | Call


@dataclasses.dataclass(frozen=True, slots=True)
class SetAction:
    path: Path
    source: SetSource


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveAction:
    path: Path


# Statements ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """The table a statement names, and for a SELECT the index it reads."""

    table: str
    index: str | None
    token: Token = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Select:
    projection: tuple[Path, ...] | None  # None: `*`
    target: Target
    where: Condition | None
    order_by: tuple[tuple[Path, bool], ...]  # (key, descending)
    parameters: int  # how many `?` the statement has


@dataclasses.dataclass(frozen=True, slots=True)
class Insert:
    target: Target
    item: Value
    parameters: int


@dataclasses.dataclass(frozen=True, slots=True)
class Update:
    target: Target
    actions: tuple[SetAction | RemoveAction, ...]
    where: Condition
    returning: str | None  # ReturnValues: ALL_OLD, UPDATED_OLD, ALL_NEW or UPDATED_NEW
    parameters: int


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    target: Target
    where: Condition
    returning: str | None  # only ALL_OLD
    parameters: int


@dataclasses.dataclass(frozen=True, slots=True)
class Exists:
    """`EXISTS(SELECT * FROM t WHERE <full key> [AND ...])`: a transaction's condition check."""

    select: Select
    parameters: int


Statement = Select | Insert | Update | Delete | Exists

# RETURNING's words and the ReturnValues each stands for.
RETURNING = {
    ("ALL", "OLD"): "ALL_OLD",
    ("MODIFIED", "OLD"): "UPDATED_OLD",
    ("ALL", "NEW"): "ALL_NEW",
    ("MODIFIED", "NEW"): "UPDATED_NEW",
}


# Rendering -------------------------------------------------------------------------------------


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def render_path(path: Path) -> str:
    parts = [_identifier(path.name)]
    for element in path.elements[1:]:
        parts.append(f"[{element}]" if isinstance(element, int) else "." + _identifier(element))
    return "".join(parts)


def render_value(value: Value) -> str:
    if isinstance(value, Literal):
        kind, raw = value.value
        if kind == "S":
            return _string(raw)
        if kind == "N":
            return str(raw)
        if kind == "BOOL":
            return "TRUE" if raw else "FALSE"
        return "NULL"
    if isinstance(value, Missing):
        return "MISSING"
    if isinstance(value, Parameter):
        return "?"
    if isinstance(value, ListValue):
        return "[" + ", ".join(render_value(item) for item in value.items) + "]"
    if isinstance(value, MapValue):
        entries = (f"{_string(key)}: {render_value(item)}" for key, item in value.entries)
        return "{" + ", ".join(entries) + "}"
    return "<<" + ", ".join(render_value(item) for item in value.items) + ">>"


def render_operand(operand: Operand) -> str:
    if isinstance(operand, Path):
        return render_path(operand)
    if isinstance(operand, Size):
        return f"size({render_path(operand.path)})"
    return render_value(operand)


def render_condition(condition: Condition) -> str:
    if isinstance(condition, Comparison):
        left, right = render_operand(condition.left), render_operand(condition.right)
        return f"{left} {condition.op} {right}"
    if isinstance(condition, Between):
        operands = (condition.operand, condition.low, condition.high)
        first, low, high = (render_operand(o) for o in operands)
        return f"{first} BETWEEN {low} AND {high}"
    if isinstance(condition, In):
        values = ", ".join(render_operand(v) for v in condition.values)
        return f"{render_operand(condition.operand)} IN [{values}]"
    if isinstance(condition, Is):
        negation = "NOT " if condition.negated else ""
        return f"{render_path(condition.path)} IS {negation}{condition.what}"
    if isinstance(condition, Function):
        path, argument = render_path(condition.path), render_operand(condition.argument)
        return f"{condition.name}({path}, {argument})"
    if isinstance(condition, And | Or):
        joiner = " AND " if isinstance(condition, And) else " OR "
        return joiner.join(f"({render_condition(item)})" for item in condition.items)
    return f"NOT ({render_condition(condition.item)})"


def _render_source(source: SetSource) -> str:
    if isinstance(source, Path):
        return render_path(source)
    if isinstance(source, Arithmetic):
        left, right = (
            render_path(o) if isinstance(o, Path) else render_value(o)
            for o in (source.left, source.right)
        )
        return f"{left} {source.op} {right}"
    if isinstance(source, Call):
        arguments = ", ".join(
            render_path(a) if isinstance(a, Path) else render_value(a) for a in source.arguments
        )
        return f"{source.name}({arguments})"
    return render_value(source)


def _render_target(target: Target) -> str:
    index = "" if target.index is None else "." + _identifier(target.index)
    return _identifier(target.table) + index


def _render_returning(returning: str | None) -> str:
    if returning is None:
        return ""
    words = next(key for key, value in RETURNING.items() if value == returning)
    return f" RETURNING {words[0]} {words[1]} *"


def render(statement: Statement) -> str:
    """`statement` as PartiQL text that parses back to the same tree (token places aside)."""
    if isinstance(statement, Select):
        projection = (
            "*"
            if statement.projection is None
            else ", ".join(render_path(p) for p in statement.projection)
        )
        text = f"SELECT {projection} FROM {_render_target(statement.target)}"
        if statement.where is not None:
            text += f" WHERE {render_condition(statement.where)}"
        if statement.order_by:
            keys = ", ".join(
                f"{render_path(path)} {'DESC' if descending else 'ASC'}"
                for path, descending in statement.order_by
            )
            text += f" ORDER BY {keys}"
        return text
    if isinstance(statement, Insert):
        return (
            f"INSERT INTO {_render_target(statement.target)} VALUE {render_value(statement.item)}"
        )
    if isinstance(statement, Update):
        actions = " ".join(
            f"SET {render_path(a.path)} = {_render_source(a.source)}"
            if isinstance(a, SetAction)
            else f"REMOVE {render_path(a.path)}"
            for a in statement.actions
        )
        where = render_condition(statement.where)
        return (
            f"UPDATE {_render_target(statement.target)} {actions} WHERE {where}"
            + _render_returning(statement.returning)
        )
    if isinstance(statement, Delete):
        where = render_condition(statement.where)
        return f"DELETE FROM {_render_target(statement.target)} WHERE {where}" + _render_returning(
            statement.returning
        )
    return f"EXISTS({render(statement.select)})"

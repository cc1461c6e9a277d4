"""Update expressions: checking them as DynamoDB does, and applying them to an item.

Application follows the Developer Guide: every action is evaluated against the item as it was
before the update ("DynamoDB evaluates every action against the item's attribute values as they
were before the update"), so ``SET a = b, b = a`` swaps two attributes. Because DynamoDB rejects
overlapping paths, actions touch disjoint parts of the item and may be applied one after another;
the only interaction left is between actions on elements of the same list, which DynamoDB resolves
by index in the original list. So removals of list elements are applied last, from the highest
index down (``REMOVE a[1], a[2]`` removes the two original elements), and elements SET or ADDed
past the end of a list are appended in the order of their indexes ("If you add multiple elements
in a single SET operation, the elements are sorted in order by element number").

The input item is never modified: containers on the way to a change are copied, everything else
is shared between the input and the result, so both must be treated as immutable.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from core import limits
from core.errors import ValidationError
from core.expressions import ast
from core.expressions.binding import (
    ARITY,
    CONFLICT,
    FUNCTION,
    OPERAND,
    OVERLAP,
    UNKNOWN_FUNCTION,
    Binder,
    ResolvedPath,
    describe_path,
)
from core.expressions.document import clone, get_path
from core.values import SET_TYPES, AttributeValue, Item, add_numbers, subtract_numbers, type_of

FUNCTION_ARITY = {"if_not_exists": 2, "list_append": 2}

INVALID_PATH = "The document path provided in the update expression is invalid for update"
TOO_DEEP = "Nesting Levels have exceeded supported limits"
INCORRECT_TYPE = "An operand in the update expression has an incorrect data type"
# The same mistake (ADD or DELETE of a value whose type is not the attribute's) in AttributeUpdates.
LEGACY_MISMATCH = "Type mismatch for attribute to update"
MISSING_ATTRIBUTE = "The provided expression refers to an attribute that does not exist in the item"
# ADD takes numbers and sets, DELETE only sets; DynamoDB names the other types in full.
_ADD_TYPES = frozenset({"N", "SS", "NS", "BS"})
_DELETE_TYPES = frozenset({"SS", "NS", "BS"})
_TYPE_NAMES = {
    "S": "STRING",
    "N": "NUMBER",
    "B": "BINARY",
    "NULL": "NULL",
    "BOOL": "BOOLEAN",
    "L": "LIST",
    "M": "MAP",
}

ValueOf = Callable[[Item], AttributeValue]


# Checking --------------------------------------------------------------------------------------


def _value_type(operand: ast.Operand, binder: Binder) -> str | None:
    if isinstance(operand, ast.ValueOperand):
        value = binder.values.get(operand.name)
        return type_of(value) if value is not None else None
    return None


def _incorrect_type(binder: Binder, name: str, operand_type: str) -> None:
    binder.note(
        FUNCTION,
        "Incorrect operand type for operator or function; "
        f"operator or function: {name}, operand type: {operand_type}",
    )


def _check_operand(operand: ast.Operand, binder: Binder) -> None:
    """Record the problems of a SET value in text order. This and ``_compile_value`` recurse once
    per nested function, as the value's evaluation does: 4 KB hold at most 255 nested calls
    (``list_append(`` and ``,:l)`` are 16 bytes a level), far inside Python's limit of 1,000
    (``tests/unit/test_expr_nesting.py`` runs them with 300 frames left). Conditions, whose
    nesting costs as little as 4 bytes a level, are walked without recursion."""
    if isinstance(operand, ast.PathOperand):
        binder.path(operand.path)
    elif isinstance(operand, ast.ValueOperand):
        binder.value(operand.name)
    elif isinstance(operand, ast.Arithmetic):
        _check_operand(operand.left, binder)
        _check_operand(operand.right, binder)
        for side in (operand.left, operand.right):
            side_type = _value_type(side, binder)
            if side_type is not None and side_type != "N":
                _incorrect_type(binder, operand.op, side_type)
                break
    else:
        for arg in operand.args:
            _check_operand(arg, binder)
        arity = FUNCTION_ARITY.get(operand.name)
        if arity is None:
            # The parser lets only DynamoDB's function names be called: this is a condition's.
            binder.note(
                UNKNOWN_FUNCTION,
                f"The function is not allowed in an update expression; function: {operand.name}",
            )
        elif len(operand.args) != arity:
            binder.note(
                ARITY,
                "Incorrect number of operands for operator or function; "
                f"operator or function: {operand.name}, number of operands: {len(operand.args)}",
            )
        elif operand.name == "if_not_exists":
            if not isinstance(operand.args[0], ast.PathOperand):
                binder.note(
                    FUNCTION,
                    "Operator or function requires a document path; "
                    "operator or function: if_not_exists",
                )
        else:
            for arg in operand.args:
                arg_type = _value_type(arg, binder)
                if arg_type is not None and arg_type != "L":
                    _incorrect_type(binder, operand.name, arg_type)
                    break


def check_paths(paths: list[ResolvedPath], binder: Binder) -> None:
    """DynamoDB's rule that no two actions may touch overlapping or conflicting document paths."""
    for later_index, later in enumerate(paths):
        for earlier in paths[:later_index]:
            for position in range(min(len(earlier), len(later))):
                if isinstance(earlier[position], int) != isinstance(later[position], int):
                    binder.note(
                        CONFLICT,
                        "Two document paths conflict with each other; must remove or rewrite one "
                        f"of these paths; path one: {describe_path(earlier)}, "
                        f"path two: {describe_path(later)}",
                    )
                    break
                if earlier[position] != later[position]:
                    break
            else:
                binder.note(
                    OVERLAP,
                    "Two document paths overlap with each other; must remove or rewrite one of "
                    f"these paths; path one: {describe_path(earlier)}, "
                    f"path two: {describe_path(later)}",
                )
                return


def check_update(tree: ast.UpdateExpression, binder: Binder) -> list[ResolvedPath]:
    """Record every problem of an update tree in ``binder``; return the resolved target paths."""
    targets: list[ResolvedPath] = []
    for clause in tree.clauses:
        for action in clause.actions:
            target = binder.path(action.path)
            if target is not None:
                targets.append(target)
            if isinstance(action, ast.SetAction):
                _check_operand(action.value, binder)
            elif isinstance(action, ast.AddAction | ast.DeleteAction):
                value = binder.value(action.value.name)
                allowed = _ADD_TYPES if isinstance(action, ast.AddAction) else _DELETE_TYPES
                if value is not None and type_of(value) not in allowed:
                    binder.note(
                        OPERAND,
                        "Incorrect operand type for operator or function; "
                        f"operator: {clause.keyword}, "
                        f"operand type: {_TYPE_NAMES.get(type_of(value), type_of(value))}",
                    )
    check_paths(targets, binder)
    return targets


# Compiling the right-hand sides of SET ---------------------------------------------------------


def _compile_value(operand: ast.Operand, binder: Binder) -> ValueOf:
    """A function computing a checked SET value (see ``_check_operand`` on its recursion)."""
    if isinstance(operand, ast.ValueOperand):
        value = binder.values[operand.name]
        return lambda item: value
    if isinstance(operand, ast.PathOperand):
        path = binder.paths[operand.path]

        def read(item: Item) -> AttributeValue:
            found = get_path(item, path)
            if found is None:
                raise ValidationError(MISSING_ATTRIBUTE)
            return found

        return read
    if isinstance(operand, ast.Arithmetic):
        left, right = _compile_value(operand.left, binder), _compile_value(operand.right, binder)
        combine = add_numbers if operand.op == "+" else subtract_numbers

        def arithmetic(item: Item) -> AttributeValue:
            first = _number(left(item))
            return {"N": combine(first, _number(right(item)))}

        return arithmetic
    # Both functions take two operands once checked. Not a comprehension: its frame would add a
    # second Python call per level of nesting.
    head_of, tail_of = (
        _compile_value(operand.args[0], binder),
        _compile_value(operand.args[1], binder),
    )
    if operand.name == "if_not_exists":
        first = operand.args[0]
        assert isinstance(first, ast.PathOperand)
        path = binder.paths[first.path]
        return lambda item: found if (found := get_path(item, path)) is not None else tail_of(item)

    def list_append(item: Item) -> AttributeValue:
        head = _list(head_of(item))
        return {"L": head + _list(tail_of(item))}

    return list_append


def _number(value: AttributeValue) -> str:
    number = value.get("N")
    if number is None:
        raise ValidationError(INCORRECT_TYPE)
    text: str = number
    return text


def _list(value: AttributeValue) -> list[AttributeValue]:
    elements = value.get("L")
    if elements is None:
        raise ValidationError(INCORRECT_TYPE)
    result: list[AttributeValue] = elements
    return result


# Applying --------------------------------------------------------------------------------------


class _Edit:
    """One application of an update to one item, copying containers only where it writes."""

    def __init__(self, item: Item) -> None:
        self.item: dict[str, Any] = dict(item)
        self.fresh: set[int] = set()  # ids of the containers this edit owns (copied or created)
        self.appends: dict[int, tuple[list[Any], list[tuple[int, AttributeValue]]]] = {}
        self.removals: dict[int, tuple[list[Any], set[int]]] = {}

    def container(self, path: ResolvedPath) -> dict[str, Any] | list[Any]:
        """The (owned) map members or list elements holding the last element of ``path``."""
        container: dict[str, Any] | list[Any] = self.item
        for step, following in itertools.pairwise(path):
            if isinstance(step, int):
                if not isinstance(container, list) or step >= len(container):
                    raise ValidationError(INVALID_PATH)
                child = container[step]
            else:
                if not isinstance(container, dict):
                    raise ValidationError(INVALID_PATH)
                child = container.get(step)
                if child is None:
                    raise ValidationError(INVALID_PATH)
            tag = "L" if isinstance(following, int) else "M"
            inner = child.get(tag)
            if inner is None:
                raise ValidationError(INVALID_PATH)
            if id(inner) not in self.fresh:
                inner = list(inner) if tag == "L" else dict(inner)
                self.fresh.add(id(inner))
                container[step] = {tag: inner}  # type: ignore[index]
            container = inner
        return container

    def read(self, container: dict[str, Any] | list[Any], key: str | int) -> Any:
        if isinstance(key, int):
            assert isinstance(container, list)
            return container[key] if key < len(container) else None
        assert isinstance(container, dict)
        return container.get(key)

    def write(self, container: dict[str, Any] | list[Any], key: str | int, value: Any) -> None:
        if isinstance(key, int):
            assert isinstance(container, list)
            if key < len(container):
                container[key] = value
            else:
                # SET past the end of a list appends (Developer Guide, "Adding elements to a list").
                self.appends.setdefault(id(container), (container, []))[1].append((key, value))
        else:
            assert isinstance(container, dict)
            container[key] = value

    def remove(self, container: dict[str, Any] | list[Any], key: str | int) -> None:
        if isinstance(key, int):
            assert isinstance(container, list)
            if key < len(container):
                self.removals.setdefault(id(container), (container, set()))[1].add(key)
        else:
            assert isinstance(container, dict)
            container.pop(key, None)

    def finish(self) -> Item:
        for container, indexes in self.removals.values():
            for index in sorted(indexes, reverse=True):
                del container[index]
        for container, additions in self.appends.values():
            container.extend(value for _, value in sorted(additions, key=lambda pair: pair[0]))
        return self.item


def _added(existing: AttributeValue | None, value: AttributeValue, mismatch: str) -> AttributeValue:
    if existing is None:
        result: AttributeValue = clone(value)
        return result
    tag = type_of(value)
    if type_of(existing) != tag:
        raise ValidationError(mismatch)
    if tag == "N":
        return {"N": add_numbers(existing["N"], value["N"])}
    members = existing[tag]
    present = set(members)
    return {tag: [*members, *(member for member in value[tag] if member not in present)]}


def _deleted(
    existing: AttributeValue, value: AttributeValue, mismatch: str
) -> AttributeValue | None:
    tag = type_of(value)
    if type_of(existing) != tag:
        raise ValidationError(mismatch)
    removed = set(value[tag])
    remaining = [member for member in existing[tag] if member not in removed]
    # Deleting every element of a set removes the attribute: DynamoDB has no empty sets.
    return {tag: remaining} if remaining else None


Step = Callable[[_Edit, Item], None]


def _depth(value: AttributeValue) -> int:
    """How many levels a value occupies: 1 for a scalar or set, more for nested lists and maps."""
    ((tag, raw),) = value.items()
    if tag == "M":
        return 1 + max((_depth(member) for member in raw.values()), default=0)
    if tag == "L":
        return 1 + max((_depth(element) for element in raw), default=0)
    return 1


def _set_step(path: ResolvedPath, value_of: ValueOf) -> Step:
    # A value written below the top level may push the item past DynamoDB's 32 levels of nesting
    # (a top-level value has been validated already, and nothing else can deepen it).
    nested_levels = len(path) - 1

    def step(edit: _Edit, old: Item) -> None:
        value = clone(value_of(old))
        if nested_levels and nested_levels + _depth(value) > limits.NESTING_DEPTH_MAX:
            raise ValidationError(TOO_DEEP)
        edit.write(edit.container(path), path[-1], value)

    return step


def _remove_step(path: ResolvedPath) -> Step:
    def step(edit: _Edit, old: Item) -> None:
        edit.remove(edit.container(path), path[-1])

    return step


def _add_step(path: ResolvedPath, value: AttributeValue, mismatch: str) -> Step:
    def step(edit: _Edit, old: Item) -> None:
        container = edit.container(path)
        edit.write(container, path[-1], _added(edit.read(container, path[-1]), value, mismatch))

    return step


def _delete_step(path: ResolvedPath, value: AttributeValue, mismatch: str) -> Step:
    assert type_of(value) in SET_TYPES

    def step(edit: _Edit, old: Item) -> None:
        container = edit.container(path)
        existing = edit.read(container, path[-1])
        if existing is None:
            return
        remaining = _deleted(existing, value, mismatch)
        if remaining is None:
            edit.remove(container, path[-1])
        else:
            edit.write(container, path[-1], remaining)

    return step


def compile_update(
    tree: ast.UpdateExpression, binder: Binder, mismatch: str = INCORRECT_TYPE
) -> Callable[[Item], Item]:
    """A function applying a checked update to an item and returning the new item; an ADD or
    DELETE of a value whose type is not the attribute's raises `mismatch`."""
    steps: list[Step] = []
    for clause in tree.clauses:
        for action in clause.actions:
            path = binder.paths[action.path]
            if isinstance(action, ast.SetAction):
                steps.append(_set_step(path, _compile_value(action.value, binder)))
            elif isinstance(action, ast.RemoveAction):
                steps.append(_remove_step(path))
            elif isinstance(action, ast.AddAction):
                steps.append(_add_step(path, binder.values[action.value.name], mismatch))
            else:
                steps.append(_delete_step(path, binder.values[action.value.name], mismatch))

    def apply(item: Item) -> Item:
        edit = _Edit(item)
        for step in steps:
            step(edit, item)
        return edit.finish()

    return apply

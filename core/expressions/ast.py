"""The syntax trees of DynamoDB expressions, and their rendering back to expression text.

Trees are frozen dataclasses, so two parses of the same text compare equal and a parsed tree can be
cached and shared between requests. They hold the text's own spelling: a document path is a tuple
whose elements are bare names (``"a"``), ExpressionAttributeNames placeholders (``"#a"``; a bare
name can never start with ``#``) and list indexes (``0``). Placeholders are resolved later, when the
tree is bound to a request's ExpressionAttributeNames and ExpressionAttributeValues.

Parentheses are not kept: ``And``/``Or`` are left-associative as parsed, and ``render_*`` puts back
exactly the parentheses that precedence requires (NOT binds tighter than AND, AND tighter than OR,
comparisons tighter than all three), so ``parse(render(tree)) == tree`` and the rendered text never
has the doubled parentheses DynamoDB rejects as redundant.
"""

from __future__ import annotations

from dataclasses import dataclass

PathElement = str | int
Path = tuple[PathElement, ...]


@dataclass(frozen=True, slots=True)
class PathOperand:
    path: Path


@dataclass(frozen=True, slots=True)
class ValueOperand:
    name: str  # the placeholder, ":v"


@dataclass(frozen=True, slots=True)
class Call:
    """A function call: a condition (attribute_exists, ...) or an operand (size, list_append)."""

    name: str
    args: tuple[Operand, ...]


@dataclass(frozen=True, slots=True)
class Arithmetic:
    """``left + right`` or ``left - right`` on the right-hand side of an update's SET action."""

    op: str
    left: Operand
    right: Operand


Operand = PathOperand | ValueOperand | Call | Arithmetic


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # "=", "<>", "<", "<=", ">", ">="
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class Between:
    operand: Operand
    low: Operand
    high: Operand


@dataclass(frozen=True, slots=True)
class In:
    operand: Operand
    choices: tuple[Operand, ...]


@dataclass(frozen=True, slots=True)
class And:
    left: Condition
    right: Condition


@dataclass(frozen=True, slots=True)
class Or:
    left: Condition
    right: Condition


@dataclass(frozen=True, slots=True)
class Not:
    operand: Condition


Condition = Compare | Between | In | And | Or | Not | Call


@dataclass(frozen=True, slots=True)
class SetAction:
    path: Path
    value: Operand


@dataclass(frozen=True, slots=True)
class RemoveAction:
    path: Path


@dataclass(frozen=True, slots=True)
class AddAction:
    path: Path
    value: ValueOperand


@dataclass(frozen=True, slots=True)
class DeleteAction:
    path: Path
    value: ValueOperand


UpdateAction = SetAction | RemoveAction | AddAction | DeleteAction


@dataclass(frozen=True, slots=True)
class UpdateClause:
    keyword: str  # "SET", "REMOVE", "ADD" or "DELETE"
    actions: tuple[UpdateAction, ...]


@dataclass(frozen=True, slots=True)
class UpdateExpression:
    """The clauses in the order they were written; DynamoDB allows each keyword at most once."""

    clauses: tuple[UpdateClause, ...]


@dataclass(frozen=True, slots=True)
class ProjectionExpression:
    paths: tuple[Path, ...]


# Rendering ------------------------------------------------------------------------------------

# Binding strength of each condition node when it appears as an operand of AND/OR/NOT.
_OR, _AND, _NOT, _ATOM = 1, 2, 3, 4


def render_path(path: Path) -> str:
    parts: list[str] = []
    for element in path:
        if isinstance(element, int):
            parts.append(f"[{element}]")
        else:
            parts.append(f".{element}" if parts else element)
    return "".join(parts)


def render_operand(operand: Operand) -> str:
    if isinstance(operand, PathOperand):
        return render_path(operand.path)
    if isinstance(operand, ValueOperand):
        return operand.name
    if isinstance(operand, Call):
        return f"{operand.name}({', '.join(render_operand(arg) for arg in operand.args)})"
    return f"{render_operand(operand.left)} {operand.op} {render_operand(operand.right)}"


def _strength(node: Condition) -> int:
    if isinstance(node, Or):
        return _OR
    if isinstance(node, And):
        return _AND
    if isinstance(node, Not):
        return _NOT
    return _ATOM


def _render_at(node: Condition, minimum: int) -> str:
    text = render_condition(node)
    return f"({text})" if _strength(node) < minimum else text


def render_condition(node: Condition) -> str:
    if isinstance(node, Or):
        # Left-associative: a right operand of the same strength needs parentheses to stay there.
        return f"{_render_at(node.left, _OR)} OR {_render_at(node.right, _AND)}"
    if isinstance(node, And):
        return f"{_render_at(node.left, _AND)} AND {_render_at(node.right, _NOT)}"
    if isinstance(node, Not):
        return f"NOT {_render_at(node.operand, _NOT)}"
    if isinstance(node, Compare):
        return f"{render_operand(node.left)} {node.op} {render_operand(node.right)}"
    if isinstance(node, Between):
        low, high = render_operand(node.low), render_operand(node.high)
        return f"{render_operand(node.operand)} BETWEEN {low} AND {high}"
    if isinstance(node, In):
        choices = ", ".join(render_operand(choice) for choice in node.choices)
        return f"{render_operand(node.operand)} IN ({choices})"
    return render_operand(node)


def _render_action(action: UpdateAction) -> str:
    if isinstance(action, SetAction):
        return f"{render_path(action.path)} = {render_operand(action.value)}"
    if isinstance(action, RemoveAction):
        return render_path(action.path)
    return f"{render_path(action.path)} {action.value.name}"


def render_update(expression: UpdateExpression) -> str:
    return " ".join(
        f"{clause.keyword} {', '.join(_render_action(action) for action in clause.actions)}"
        for clause in expression.clauses
    )


def render_projection(expression: ProjectionExpression) -> str:
    return ", ".join(render_path(path) for path in expression.paths)

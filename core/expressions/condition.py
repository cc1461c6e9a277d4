"""Condition and filter expressions: checking them as DynamoDB does, and compiling them to closures.

``plan_condition`` works out once per text what DynamoDB checks (functions, arity, operand types,
distinct operands, BETWEEN bounds); ``ConditionPlan.bind`` runs those checks against a request's
placeholders, and ``compile_condition`` turns the checked tree into small closures, one per
comparison, function and chain of one connective, each taking an item and returning a bool or an
attribute value. Evaluating a compiled condition is then a few Python calls per node with no
dispatch on node types, and none of the three steps recurses per level of nesting (see
``_program``). Comparisons against a constant (the common ``attr > :value``) are specialised so
that the constant's number or bytes are decoded once, at compile time, instead of once per item.

Evaluation follows the Developer Guide's comparison rules: values of different types are never
equal and never ordered, so ``<``, ``<=``, ``>``, ``>=`` and BETWEEN are false across types and
for types without an order (only S, N and B are ordered), ``=`` is false and ``<>`` true. A
constant operand of a type without an order is refused before any item is read ("Incorrect
operand type for operator or function"), as DynamoDB does. An absent
operand (a missing attribute, or ``size`` of one) makes every comparison false except ``<>``, which
DynamoDB defines as the negation of ``=``.
"""

from __future__ import annotations

import base64
import operator
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core.expressions import ast
from core.expressions.binding import (
    ARITY,
    DISTINCT,
    FUNCTION,
    MISUSED_FUNCTION,
    ORDER,
    UNKNOWN_FUNCTION,
    Binder,
    describe_path,
    describe_value,
)
from core.expressions.document import Getter, make_getter
from core.expressions.parser import UPDATE_FUNCTIONS, Deferred, Parsed
from core.values import SET_TYPES, AttributeValue, Item, compare, equal, type_of

Predicate = Callable[[Item], bool]

# Functions of condition expressions and their number of operands ("These function names are
# case-sensitive", Developer Guide). ``size`` is the only one usable as an operand.
FUNCTION_ARITY = {
    "attribute_exists": 1,
    "attribute_not_exists": 1,
    "attribute_type": 2,
    "begins_with": 2,
    "contains": 2,
    "size": 1,
}
ATTRIBUTE_TYPES = ("B", "NULL", "SS", "BOOL", "L", "BS", "N", "NS", "S", "M")
_ANY_TYPE = "{NS,SS,L,BS,N,M,B,BOOL,NULL,S}"
_ORDERED = frozenset({"S", "N", "B"})
_ORDERING = frozenset({"<", "<=", ">", ">="})
_SCALARS = frozenset({"S", "N", "B", "BOOL", "NULL"})


# Checking --------------------------------------------------------------------------------------
#
# Most of what DynamoDB checks depends on the text alone; the rest needs the request's placeholders
# (are they defined, which types do the values have, do two names resolve to the same path). So a
# text is planned once: the plan lists the paths and values to resolve and the checks to run, in
# text order, each check either a finding already known or a small function of the binding. A
# request then only resolves, runs those checks and compiles.

Check = Callable[[Binder], None]


def _static_type(operand: ast.Operand, binder: Binder) -> str | None:
    """The type an operand is known to have before any item is seen (values and ``size``)."""
    if isinstance(operand, ast.ValueOperand):
        value = binder.values.get(operand.name)
        return type_of(value) if value is not None else None
    if isinstance(operand, ast.Call) and operand.name == "size":
        return "N"
    return None


def _has_static_type(operand: ast.Operand) -> bool:
    return isinstance(operand, ast.ValueOperand) or (
        isinstance(operand, ast.Call) and operand.name == "size"
    )


def _incorrect_type(binder: Binder, name: str, operand_type: str, category: str = FUNCTION) -> None:
    binder.note(
        category,
        "Incorrect operand type for operator or function; "
        f"operator or function: {name}, operand type: {operand_type}",
    )


def _distinct_check(operator_name: str, first: ast.Path, second: ast.Path) -> Check:
    # DynamoDB rejects comparing a path with itself ("a = a", "contains(a, a)") as a mistake.
    def check(binder: Binder) -> None:
        resolved = binder.paths.get(first)
        if resolved is not None and resolved == binder.paths.get(second):
            binder.note(
                DISTINCT,
                "The first operand must be distinct from the remaining operands for this operator "
                f"or function; operator: {operator_name}, first operand: {describe_path(resolved)}",
            )

    return check


def _operand_types_check(
    name: str,
    operands: tuple[ast.Operand, ...],
    allowed: frozenset[str],
    category: str = FUNCTION,
) -> Check:
    def check(binder: Binder) -> None:
        for operand in operands:
            operand_type = _static_type(operand, binder)
            if operand_type is not None and operand_type not in allowed:
                _incorrect_type(binder, name, operand_type, category)
                return

    return check


def _attribute_type_check(operand: ast.Operand) -> Check:
    def check(binder: Binder) -> None:
        operand_type = _static_type(operand, binder)
        if operand_type != "S":
            _incorrect_type(binder, "attribute_type", operand_type or _ANY_TYPE)
            return
        assert isinstance(operand, ast.ValueOperand)
        type_name = binder.values[operand.name]["S"]
        if type_name not in ATTRIBUTE_TYPES:
            binder.note(
                FUNCTION,
                f"Invalid attribute type name found; type: {type_name}, "
                f"valid types: {{{','.join(ATTRIBUTE_TYPES)}}}",
            )

    return check


def _between_check(low_name: str, high_name: str) -> Check:
    def check(binder: Binder) -> None:
        low, high = binder.values.get(low_name), binder.values.get(high_name)
        if low is None or high is None:
            return
        bounds = (
            f"lower bound operand: {describe_value(low)}, "
            f"upper bound operand: {describe_value(high)}"
        )
        if type_of(low) != type_of(high):
            binder.note(
                FUNCTION,
                "The BETWEEN operator requires same data type for lower and upper bounds; "
                + bounds,
            )
        elif compare(low, high) == 1:
            binder.note(
                FUNCTION,
                "The BETWEEN operator requires upper bound to be greater than or equal to lower "
                f"bound; {bounds}",
            )

    return check


_SIZE_FORBIDDEN = frozenset({"N", "BOOL", "NULL"})
_SIZE_ALLOWED = frozenset(ATTRIBUTE_TYPES) - _SIZE_FORBIDDEN
_STRING_OR_BINARY = frozenset({"S", "B"})


@dataclass(frozen=True, slots=True)
class ConditionPlan:
    """The checks of one condition text, ready to run against any request's placeholders."""

    parsed: Parsed
    tree: ast.Condition
    resolutions: tuple[ast.Path | str, ...]  # paths and value placeholders, in text order
    checks: tuple[Deferred | Check, ...]  # findings known from the text, and binding checks
    program: Program  # how to compile the tree (``_program``)

    def bind(self, binder: Binder) -> None:
        """Resolve the placeholders into ``binder`` and record every finding there."""
        for resolution in self.resolutions:
            if isinstance(resolution, str):
                binder.value(resolution)
            else:
                binder.path(resolution)
        for check in self.checks:
            if isinstance(check, Deferred):
                binder.findings.append(check)
            else:
                check(binder)


class _Planner:
    def __init__(self) -> None:
        self.resolutions: dict[ast.Path | str, None] = {}
        self.checks: list[Deferred | Check] = []

    def note(self, category: str, message: str) -> None:
        self.checks.append(Deferred(category, message))

    def unknown(self, name: str) -> None:
        if name in UPDATE_FUNCTIONS:
            message = f"The function is not allowed in a condition expression; function: {name}"
        else:
            message = f"Invalid function name; function: {name}"
        self.note(UNKNOWN_FUNCTION, message)

    def misused(self, name: str) -> None:
        self.note(
            MISUSED_FUNCTION,
            f"The function is not allowed to be used this way in an expression; function: {name}",
        )

    def distinct(self, operator_name: str, first: ast.Operand, second: ast.Operand) -> None:
        if isinstance(first, ast.PathOperand) and isinstance(second, ast.PathOperand):
            self.checks.append(_distinct_check(operator_name, first.path, second.path))

    def operand(self, operand: ast.Operand) -> None:
        """Record an operand's placeholders and checks, and those of the calls nested in it, in
        text order; the calls wait on a stack until their arguments are recorded."""
        stack: list[tuple[ast.Operand, bool]] = [(operand, False)]
        while stack:
            entry, arguments_done = stack.pop()
            if arguments_done:
                assert isinstance(entry, ast.Call)
                self.call(entry)
            elif isinstance(entry, ast.PathOperand):
                self.resolutions[entry.path] = None
            elif isinstance(entry, ast.ValueOperand):
                self.resolutions[entry.name] = None
            elif isinstance(entry, ast.Call):
                if entry.name not in FUNCTION_ARITY:
                    self.unknown(entry.name)
                elif entry.name != "size":
                    self.misused(entry.name)
                stack.append((entry, True))
                stack.extend((arg, False) for arg in reversed(entry.args))
            else:
                # Arithmetic belongs to update expressions; the condition grammar cannot produce it.
                raise AssertionError(f"unexpected operand {type(entry).__name__}")

    def function(self, call: ast.Call) -> None:
        for arg in call.args:
            self.operand(arg)
        self.call(call)

    def call(self, call: ast.Call) -> None:
        """The checks of a call itself, once its arguments are recorded."""
        name, args = call.name, call.args
        arity = FUNCTION_ARITY.get(name)
        if arity is None:
            return
        if len(args) != arity:
            self.note(
                ARITY,
                "Incorrect number of operands for operator or function; "
                f"operator or function: {name}, number of operands: {len(args)}",
            )
            return
        if arity == 2:
            self.distinct(name, args[0], args[1])
        if name in ("attribute_exists", "attribute_not_exists"):
            if not isinstance(args[0], ast.PathOperand):
                self.note(
                    FUNCTION,
                    f"Operator or function requires a document path; operator or function: {name}",
                )
        elif name == "begins_with":
            if any(_has_static_type(arg) for arg in args):
                self.checks.append(_operand_types_check(name, args, _STRING_OR_BINARY))
        elif name == "attribute_type":
            self.checks.append(_attribute_type_check(args[1]))
        elif name == "size" and _has_static_type(args[0]):
            self.checks.append(_operand_types_check(name, args, _SIZE_ALLOWED))

    def condition(self, root: ast.Condition) -> None:
        """Plan every comparison and function of a condition in text order, walking AND, OR and
        NOT on a stack (a tree with more operators than DynamoDB allows is planned too, since
        its ranked findings decide the error)."""
        stack = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.And | ast.Or):
                stack.append(node.right)
                stack.append(node.left)
            elif isinstance(node, ast.Not):
                stack.append(node.operand)
            else:
                self.comparison(node)

    def comparison(self, node: ast.Compare | ast.Between | ast.In | ast.Call) -> None:
        if isinstance(node, ast.Compare):
            self.operand(node.left)
            self.operand(node.right)
            self.distinct(node.op, node.left, node.right)
            if node.op in _ORDERING and (
                _has_static_type(node.left) or _has_static_type(node.right)
            ):
                # Only S, N and B have an order: a constant of another type cannot be compared
                # with <, <=, > or >=, which DynamoDB refuses as a mistake rather than evaluating.
                self.checks.append(
                    _operand_types_check(node.op, (node.left, node.right), _ORDERED, ORDER)
                )
        elif isinstance(node, ast.Between):
            for operand in (node.operand, node.low, node.high):
                self.operand(operand)
            operands = (node.operand, node.low, node.high)
            if any(_has_static_type(operand) for operand in operands):
                self.checks.append(_operand_types_check("BETWEEN", operands, _ORDERED, ORDER))
            if isinstance(node.low, ast.ValueOperand) and isinstance(node.high, ast.ValueOperand):
                self.checks.append(_between_check(node.low.name, node.high.name))
        elif isinstance(node, ast.In):
            for operand in (node.operand, *node.choices):
                self.operand(operand)
        else:
            if node.name == "size":
                self.misused("size")
            elif node.name not in FUNCTION_ARITY:
                self.unknown(node.name)
            self.function(node)


def plan_condition(parsed: Parsed) -> ConditionPlan:
    """Work out, once per text, how to check a condition against a request's placeholders."""
    tree = parsed.tree
    assert isinstance(
        tree, ast.Compare | ast.Between | ast.In | ast.And | ast.Or | ast.Not | ast.Call
    )
    planner = _Planner()
    planner.condition(tree)
    return ConditionPlan(
        parsed, tree, tuple(planner.resolutions), tuple(planner.checks), _program(tree)
    )


# How a checked condition is compiled, worked out once per text: its comparisons and functions
# (_LEAF) and connectives in post-order, each chain of one connective (``a AND b AND c``, however
# parenthesised) as one step over all its terms, and each run of NOTs as one negation or none.
# Evaluation then nests a Python call only where AND, OR and NOT alternate: at most 200 calls deep
# within DynamoDB's 300 operators (``NOT (x AND NOT (x AND ...))`` spends 3 operators on 2 levels),
# however deep the text's nesting; and neither planning nor compiling recurses at all.
_LEAF, _NOT, _AND, _OR = 0, 1, 2, 3
Program = tuple[tuple[int, ast.Condition | None, int], ...]  # (step, leaf node, number of terms)


def _program(root: ast.Condition) -> Program:
    program: list[tuple[int, ast.Condition | None, int]] = []
    stack: list[tuple[ast.Condition, tuple[int, ast.Condition | None, int] | None]] = [(root, None)]
    while stack:
        node, after = stack.pop()
        if after is not None:
            program.append(after)
        elif isinstance(node, ast.Not):
            negations = 0
            while isinstance(node, ast.Not):
                node, negations = node.operand, negations + 1
            if negations % 2:
                stack.append((node, (_NOT, None, 1)))
            stack.append((node, None))
        elif isinstance(node, ast.And | ast.Or):
            terms = _terms(node)
            stack.append((node, (_AND if isinstance(node, ast.And) else _OR, None, len(terms))))
            stack.extend((term, None) for term in reversed(terms))
        else:
            program.append((_LEAF, node, 0))
    return tuple(program)


def _terms(node: ast.And | ast.Or) -> list[ast.Condition]:
    """The operands of the chain of one connective at ``node``, in text order."""
    connective, terms, pending = type(node), [], [node.right, node.left]
    while pending:
        term = pending.pop()
        if type(term) is connective:
            assert isinstance(term, ast.And | ast.Or)
            pending.append(term.right)
            pending.append(term.left)
        else:
            terms.append(term)
    return terms


# Evaluation helpers ----------------------------------------------------------------------------


def _size(value: AttributeValue | None) -> AttributeValue | None:
    # size() of a String is its length in characters, of a Binary its length in bytes, of a set,
    # list or map its number of elements; other types have no size and compare as absent.
    if value is None:
        return None
    ((tag, raw),) = value.items()
    if tag == "B":
        return {"N": str(len(base64.b64decode(raw)))}
    if tag in ("S", "SS", "NS", "BS", "L", "M"):
        return {"N": str(len(raw))}
    return None


def _equal(a: AttributeValue | None, b: AttributeValue | None) -> bool:
    return a is not None and b is not None and equal(a, b)


def _ordered(
    test: Callable[[int], bool],
) -> Callable[[AttributeValue | None, AttributeValue | None], bool]:
    def check(a: AttributeValue | None, b: AttributeValue | None) -> bool:
        if a is None or b is None:
            return False
        order = compare(a, b)
        return order is not None and test(order)

    return check


_GENERAL_COMPARISONS: dict[str, Callable[[AttributeValue | None, AttributeValue | None], bool]] = {
    "=": _equal,
    "<>": lambda a, b: not _equal(a, b),
    "<": _ordered(lambda order: order < 0),
    "<=": _ordered(lambda order: order <= 0),
    ">": _ordered(lambda order: order > 0),
    ">=": _ordered(lambda order: order >= 0),
}
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _begins_with(a: AttributeValue | None, b: AttributeValue | None) -> bool:
    if a is None or b is None:
        return False
    tag = type_of(a)
    if tag != type_of(b):
        return False
    if tag == "S":
        return bool(a["S"].startswith(b["S"]))
    if tag == "B":
        return base64.b64decode(a["B"]).startswith(base64.b64decode(b["B"]))
    return False


def contains(a: AttributeValue | None, b: AttributeValue | None) -> bool:
    """DynamoDB's contains(): substring, byte subsequence, set member or list element."""
    if a is None or b is None:
        return False
    tag, operand_tag = type_of(a), type_of(b)
    if tag == "S":
        return operand_tag == "S" and b["S"] in a["S"]
    if tag == "B":
        return operand_tag == "B" and base64.b64decode(b["B"]) in base64.b64decode(a["B"])
    if tag in SET_TYPES:
        # Validated set members and scalars are canonical text, so membership is text equality.
        return SET_TYPES[tag] == operand_tag and b[operand_tag] in a[tag]
    if tag == "L":
        return any(equal(element, b) for element in a["L"])
    return False


# Compiling -------------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, binder: Binder) -> None:
        self.paths = binder.paths
        self.values = binder.values

    def constant(self, operand: ast.Operand) -> AttributeValue | None:
        return self.values[operand.name] if isinstance(operand, ast.ValueOperand) else None

    def operand(self, operand: ast.Operand) -> Getter:
        if isinstance(operand, ast.PathOperand):
            return make_getter(self.paths[operand.path])
        if isinstance(operand, ast.ValueOperand):
            value = self.values[operand.name]
            return lambda item: value
        assert isinstance(operand, ast.Call) and operand.name == "size"
        inner = self.operand(operand.args[0])
        return lambda item: _size(inner(item))

    def compare(self, node: ast.Compare) -> Predicate:
        op, left, right = node.op, node.left, node.right
        if self.constant(left) is not None and self.constant(right) is None:
            op, left, right = _FLIPPED[op], right, left
        value = self.constant(right)
        get = self.operand(left)
        if value is None or self.constant(left) is not None:
            other = self.operand(right)
            test = _GENERAL_COMPARISONS[op]
            return lambda item: test(get(item), other(item))
        tag = type_of(value)
        if op in ("=", "<>"):
            if tag in _SCALARS:
                # Validated scalars are canonical, so equality is plain dict equality.
                if op == "=":
                    return lambda item: get(item) == value
                return lambda item: get(item) != value
            if op == "=":
                return lambda item: _equal(get(item), value)
            return lambda item: not _equal(get(item), value)
        if tag not in _ORDERED:
            return lambda item: False
        return self._ordered_against(get, _OPERATORS[op], tag, value)

    @staticmethod
    def _ordered_against(
        get: Getter, test: Callable[[Any, Any], bool], tag: str, value: AttributeValue
    ) -> Predicate:
        if tag == "N":
            number = Decimal(value["N"])

            def against_number(item: Item) -> bool:
                found = get(item)
                text = found.get("N") if found is not None else None
                return text is not None and test(Decimal(text), number)

            return against_number
        if tag == "S":
            string = value["S"]

            def against_string(item: Item) -> bool:
                found = get(item)
                text = found.get("S") if found is not None else None
                # Python orders str by code point, which is the UTF-8 byte order DynamoDB uses.
                return text is not None and test(text, string)

            return against_string
        data = base64.b64decode(value["B"])

        def against_binary(item: Item) -> bool:
            found = get(item)
            text = found.get("B") if found is not None else None
            return text is not None and test(base64.b64decode(text), data)

        return against_binary

    def between(self, node: ast.Between) -> Predicate:
        get = self.operand(node.operand)
        low_get, high_get = self.operand(node.low), self.operand(node.high)

        def between(item: Item) -> bool:
            value = get(item)
            if value is None:
                return False
            low, high = low_get(item), high_get(item)
            if low is None or high is None:
                return False
            lower, upper = compare(value, low), compare(value, high)
            return lower is not None and upper is not None and lower >= 0 and upper <= 0

        return between

    def in_(self, node: ast.In) -> Predicate:
        get = self.operand(node.operand)
        choices = [self.operand(choice) for choice in node.choices]
        return lambda item: (
            (value := get(item)) is not None
            and any(
                equal(value, found) for choice in choices if (found := choice(item)) is not None
            )
        )

    def function(self, node: ast.Call) -> Predicate:
        name = node.name
        if name == "attribute_exists":
            get = self.operand(node.args[0])
            return lambda item: get(item) is not None
        if name == "attribute_not_exists":
            get = self.operand(node.args[0])
            return lambda item: get(item) is None
        first, second = self.operand(node.args[0]), self.operand(node.args[1])
        if name == "attribute_type":
            type_value = self.constant(node.args[1])
            assert type_value is not None
            tag = type_value["S"]
            return lambda item: (value := first(item)) is not None and tag in value
        if name == "begins_with":
            prefix = self.constant(node.args[1])
            if prefix is not None and "S" in prefix:
                text = prefix["S"]
                return lambda item: (
                    (value := first(item)) is not None
                    and (found := value.get("S")) is not None
                    and found.startswith(text)
                )
            return lambda item: _begins_with(first(item), second(item))
        assert name == "contains"
        return lambda item: contains(first(item), second(item))


_COMPILERS: dict[type, Callable[[_Compiler, Any], Predicate]] = {
    ast.Compare: _Compiler.compare,
    ast.Between: _Compiler.between,
    ast.In: _Compiler.in_,
    ast.Call: _Compiler.function,
}


def compile_condition(program: Program, binder: Binder) -> Predicate:
    """Closures evaluating a checked condition, from its plan's ``program``; ``binder`` must hold
    its resolved placeholders."""
    compiler = _Compiler(binder)
    if len(program) == 1:
        (_, leaf, _) = program[0]
        assert leaf is not None
        return _COMPILERS[type(leaf)](compiler, leaf)
    built: list[Predicate] = []
    for step, node, terms in program:
        if node is not None:
            built.append(_COMPILERS[type(node)](compiler, node))
        elif step == _NOT:
            built[-1] = _negation(built[-1])
        elif terms == 2:
            right = built.pop()
            built[-1] = _both(built[-1], right) if step == _AND else _either(built[-1], right)
        else:
            predicates = built[-terms:]
            del built[-terms:]
            built.append(_connect(step == _AND, predicates))
    (predicate,) = built
    return predicate


def _negation(inner: Predicate) -> Predicate:
    return lambda item: not inner(item)


def _both(left: Predicate, right: Predicate) -> Predicate:
    return lambda item: left(item) and right(item)


def _either(left: Predicate, right: Predicate) -> Predicate:
    return lambda item: left(item) or right(item)


def _connect(conjunction: bool, predicates: list[Predicate]) -> Predicate:
    """One closure for a chain of three or more ANDs (``conjunction``) or ORs over its terms'
    closures."""
    if len(predicates) == 3:
        first, second, third = predicates
        if conjunction:
            return lambda item: first(item) and second(item) and third(item)
        return lambda item: first(item) or second(item) or third(item)
    terms = tuple(predicates)
    if conjunction:
        # A loop, not all() over a generator: the generator's frame would add one Python call per
        # level of nesting to the evaluation's depth.
        def every(item: Item) -> bool:
            for term in terms:  # noqa: SIM110
                if not term(item):
                    return False
            return True

        return every

    def some(item: Item) -> bool:
        for term in terms:  # noqa: SIM110
            if term(item):
                return True
        return False

    return some

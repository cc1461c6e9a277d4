"""The PartiQL planner: a parsed statement and its Parameters, as the DynamoDB requests it means.

dynalab runs PartiQL on the operations it already has, as DynamoDB describes its own PartiQL: a
statement becomes one or more requests of the low-level API, in wire JSON, which the router's
handlers check and serve like any client's. Paths become ExpressionAttributeNames (every name a
placeholder, so reserved words need no quoting) and values ExpressionAttributeValues.

- `SELECT` whose WHERE ANDs an equality (or an IN, or ORs of equalities) on the partition key
  with at most one sort-key condition (`=`, `<`, `<=`, `>`, `>=`, BETWEEN, begins_with) reads by
  key: a GetItem when the full key is given and nothing else, otherwise one Query per
  partition-key value, the rest of the WHERE as its filter. Any other SELECT is a Scan with the
  whole WHERE as its filter: DynamoDB allows the full scan and it costs what a Scan costs.
  `ORDER BY` names the partition or sort key of what is read, and needs a read by key.
- `INSERT` is a PutItem under `attribute_not_exists` of the partition key (so an existing item
  is DynamoDB's DuplicateItemException, `insert` on the plan); `UPDATE` an UpdateItem under
  `attribute_exists` (PartiQL updates only an item that exists); `DELETE` a DeleteItem; `EXISTS`
  a transaction's ConditionCheck. A write's WHERE must hold an equality on every key attribute;
  what else it says becomes the condition expression.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from core.errors import ValidationError
from core.partiql import ast

AttributeValue = dict[str, Any]

# DynamoDB's texts, where it publishes them or they are widely quoted from its answers.
KEY_EQUALITY = "Where clause does not contain a mandatory equality on all key attributes"
PARAMETER_COUNT = "Number of parameters in request and statement don't match."
ORDER_BY_WHERE = "Must have WHERE clause in the statement when using ORDER BY clause."
BATCH_KEY_READ = (
    "Select statements within BatchExecuteStatement must specify an equality condition on all "
    "key attributes. Enforce that each SELECT statement in a batch returns at most one item."
)
WRITE_ON_INDEX = "This operation is not supported on an index"
# dynalab's own texts: DynamoDB does not publish its words for these refusals.
ORDER_BY_KEY = "ORDER BY can only name the partition key or the sort key of the table or index"
ORDER_BY_SCAN = (
    "ORDER BY needs an equality or IN condition on the partition key in the WHERE clause"
)
ORDER_BY_SORT_KEY_ACROSS = (
    "ORDER BY on the sort key alone needs a single partition key value; order by the partition "
    "key first"
)
TRANSACTION_KEY_READ = (
    "Select statements within ExecuteTransaction must specify an equality condition on all key "
    "attributes, and nothing else"
)
EMPTY_SET = "A set literal may not be empty"
MIXED_SET = "A set's members must all be strings, all numbers or all binary"
INSERT_NOT_A_MAP = "The value of an INSERT must be a map (a {...} literal or an M parameter)"
MISSING_NOT_HERE = "MISSING may only stand for a value in a comparison, a SET or a map literal"
SET_FUNCTION_PATH = (
    "set_add and set_delete must name the attribute they set as their first argument"
)
UPDATE_FUNCTION_ARGUMENTS = "{name} takes two arguments"

_SET_TYPES = {"S": "SS", "N": "NS", "B": "BS"}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_SORT_KEY_OPS = ("=", "<", "<=", ">", ">=")
# Type tuples for isinstance on the hot path: a `A | B` union is built anew at every call.
_NOT_VALUES = (ast.Path, ast.Size)
_JUNCTIONS = (ast.And, ast.Or)
# The placeholder of a Query's partition-key value (the others are :v0, :v1, ...).
_PARTITION_VALUE = ":key"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyNames:
    """The key attributes of what a statement reads or writes (an index's, for an index read)."""

    partition: str
    sort: str | None
    # A global index keyed by several partition key or sort key attributes (multi-attribute
    # keys): its SELECTs are planned as a Scan with the WHERE as its filter, since the planner
    # builds a Query's key condition from one partition key and one sort key only.
    multi_attribute: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReadPlan:
    """A SELECT as requests: one GetItem or Scan, or one Query per partition-key value.

    The requests lack what the ExecuteStatement call adds (ConsistentRead, Limit, paging and
    ReturnConsumedCapacity).
    """

    operation: str  # "GetItem", "Query" or "Scan"
    table: str
    requests: tuple[dict[str, Any], ...]
    filtered: bool  # whether the WHERE says more than the key

    @property
    def key_read(self) -> bool:
        """Whether the plan reads one item by its full key and nothing else."""
        return self.operation == "GetItem"


@dataclasses.dataclass(frozen=True, slots=True)
class WritePlan:
    """A write statement as one request of `operation` (PutItem, UpdateItem, DeleteItem, or a
    transaction's ConditionCheck), and the key of the item it writes."""

    operation: str
    table: str
    request: dict[str, Any]
    key: dict[str, AttributeValue]
    insert: bool  # a PutItem whose condition failing means DuplicateItemException


Plan = ReadPlan | WritePlan


def check_parameters(statement: ast.Statement, parameters: Sequence[AttributeValue] | None) -> None:
    """Refuse Parameters that do not match the statement's `?` one for one."""
    if statement.parameters != len(parameters or ()):
        raise ValidationError(PARAMETER_COUNT)


# Values ----------------------------------------------------------------------------------------


def bind(value: ast.Value, parameters: Sequence[AttributeValue]) -> AttributeValue | None:
    """`value` as an AttributeValue, its `?` taken from `parameters`; None for MISSING."""
    if isinstance(value, ast.Literal):
        return value.attribute_value()
    if isinstance(value, ast.Parameter):
        return parameters[value.number]
    if isinstance(value, ast.Missing):
        return None
    if isinstance(value, ast.ListValue):
        items = [bind(item, parameters) for item in value.items]
        return {"L": [item for item in items if item is not None]}
    if isinstance(value, ast.MapValue):
        entries = {key: bind(item, parameters) for key, item in value.entries}
        return {"M": {key: item for key, item in entries.items() if item is not None}}
    members = [bind(item, parameters) for item in value.items]
    if not members:
        raise ValidationError(EMPTY_SET)
    kinds = {next(iter(member)) if member else None for member in members}
    if len(kinds) != 1 or next(iter(kinds)) not in _SET_TYPES:
        raise ValidationError(f"{MIXED_SET}, at {value.token.place}")
    kind = next(iter(kinds))
    assert kind is not None
    return {_SET_TYPES[kind]: [member[kind] for member in members if member is not None]}


def _bound(value: ast.Value, parameters: Sequence[AttributeValue]) -> AttributeValue:
    bound = bind(value, parameters)
    if bound is None:
        raise ValidationError(MISSING_NOT_HERE)
    return bound


# Expressions -----------------------------------------------------------------------------------


class _Expressions:
    """Renders paths, operands and conditions into one request's expression texts, collecting
    the placeholders they use."""

    def __init__(self, parameters: Sequence[AttributeValue]) -> None:
        self.parameters = parameters
        self.names: dict[str, str] = {}
        self._name_of: dict[str, str] = {}
        self.values: dict[str, AttributeValue] = {}

    def name(self, name: str) -> str:
        placeholder = self._name_of.get(name)
        if placeholder is None:
            placeholder = f"#n{len(self._name_of)}"
            self._name_of[name] = placeholder
            self.names[placeholder] = name
        return placeholder

    def value(self, value: AttributeValue) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def path(self, path: ast.Path) -> str:
        parts = [self.name(path.name)]
        for element in path.elements[1:]:
            parts.append(f"[{element}]" if isinstance(element, int) else "." + self.name(element))
        return "".join(parts)

    def operand(self, operand: ast.Operand) -> str:
        if isinstance(operand, ast.Path):
            return self.path(operand)
        if isinstance(operand, ast.Size):
            return f"size({self.path(operand.path)})"
        return self.value(_bound(operand, self.parameters))

    def _missing(self, operand: ast.Operand) -> bool:
        return isinstance(operand, ast.Missing) or (
            isinstance(operand, ast.Parameter) and not self.parameters[operand.number]
        )

    def condition(self, condition: ast.Condition) -> str:
        if isinstance(condition, ast.Comparison):
            left, right = condition.left, condition.right
            # `a = MISSING` asks whether `a` is absent, `a <> MISSING` whether it is there.
            if self._missing(right) and isinstance(left, ast.Path) and condition.op in "=<>":
                exists = "attribute_not_exists" if condition.op == "=" else "attribute_exists"
                return f"{exists}({self.path(left)})"
            return f"{self.operand(left)} {condition.op} {self.operand(right)}"
        if isinstance(condition, ast.Between):
            first = self.operand(condition.operand)
            return (
                f"{first} BETWEEN {self.operand(condition.low)} AND {self.operand(condition.high)}"
            )
        if isinstance(condition, ast.In):
            first = self.operand(condition.operand)
            return f"{first} IN ({', '.join(self.operand(v) for v in condition.values)})"
        if isinstance(condition, ast.Is):
            path = self.path(condition.path)
            if condition.what == "MISSING":
                exists = "attribute_exists" if condition.negated else "attribute_not_exists"
                return f"{exists}({path})"
            # In PartiQL a MISSING attribute IS NULL too.
            null = self.value({"S": "NULL"})
            if condition.negated:
                return f"(attribute_exists({path}) AND NOT attribute_type({path}, {null}))"
            return f"(attribute_not_exists({path}) OR attribute_type({path}, {null}))"
        if isinstance(condition, ast.Function):
            path = self.path(condition.path)
            return f"{condition.name}({path}, {self.operand(condition.argument)})"
        if isinstance(condition, _JUNCTIONS):
            joiner = " AND " if isinstance(condition, ast.And) else " OR "
            return joiner.join(f"({self.condition(item)})" for item in condition.items)
        return f"NOT ({self.condition(condition.item)})"

    def conjunction(self, conditions: Sequence[ast.Condition]) -> str | None:
        if not conditions:
            return None
        if len(conditions) == 1:
            return self.condition(conditions[0])
        return " AND ".join(f"({self.condition(c)})" for c in conditions)

    def into(self, request: dict[str, Any]) -> dict[str, Any]:
        """`request` with the placeholders used so far."""
        if self.names:
            request["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            request["ExpressionAttributeValues"] = dict(self.values)
        return request


# Reading the WHERE clause ----------------------------------------------------------------------


def _key_path(operand: ast.Operand, name: str | None) -> bool:
    return isinstance(operand, ast.Path) and operand.is_attribute and operand.name == name


def _is_value(operand: ast.Operand) -> bool:
    return not isinstance(operand, _NOT_VALUES)


def _equality_value(condition: ast.Condition, name: str) -> ast.Value | None:
    """The value `condition` says the attribute `name` equals, if it is `name = value`."""
    if not isinstance(condition, ast.Comparison) or condition.op != "=":
        return None
    if _key_path(condition.left, name) and _is_value(condition.right):
        assert not isinstance(condition.right, _NOT_VALUES)
        return condition.right
    if _key_path(condition.right, name) and _is_value(condition.left):
        assert not isinstance(condition.left, _NOT_VALUES)
        return condition.left
    return None


def _partition_values(condition: ast.Condition, name: str) -> list[ast.Value] | None:
    """The partition-key values `condition` names: `pk = v`, `pk IN [...]`, or ORs of those."""
    single = _equality_value(condition, name)
    if single is not None:
        return [single]
    if isinstance(condition, ast.In) and _key_path(condition.operand, name):
        if all(_is_value(v) for v in condition.values):
            return [v for v in condition.values if not isinstance(v, _NOT_VALUES)]
        return None
    if isinstance(condition, ast.Or):
        found: list[ast.Value] = []
        for item in condition.items:
            values = _partition_values(item, name)
            if values is None:
                return None
            found.extend(values)
        return found
    return None


def _is_sort_condition(condition: ast.Condition, name: str) -> bool:
    """Whether `condition` can be a Query's sort-key condition on `name`."""
    if isinstance(condition, ast.Comparison) and condition.op in _SORT_KEY_OPS:
        return (_key_path(condition.left, name) and _is_value(condition.right)) or (
            _key_path(condition.right, name) and _is_value(condition.left)
        )
    if isinstance(condition, ast.Between):
        return (
            _key_path(condition.operand, name)
            and _is_value(condition.low)
            and _is_value(condition.high)
        )
    if isinstance(condition, ast.Function) and condition.name == "begins_with":
        return _key_path(condition.path, name) and _is_value(condition.argument)
    return False


def _sort_condition_text(condition: ast.Condition, expressions: _Expressions) -> str:
    """A sort-key condition written as a key condition, with the key on the left."""
    if isinstance(condition, ast.Comparison) and not isinstance(condition.left, ast.Path):
        condition = ast.Comparison(_FLIPPED[condition.op], condition.right, condition.left)
    return expressions.condition(condition)


def _top_level_names(condition: ast.Condition) -> set[str]:
    """The top-level attributes a condition reads."""
    if isinstance(condition, _JUNCTIONS):
        return set().union(*(_top_level_names(item) for item in condition.items))
    if isinstance(condition, ast.Not):
        return _top_level_names(condition.item)
    if isinstance(condition, ast.Comparison):
        operands: tuple[ast.Operand, ...] = (condition.left, condition.right)
    elif isinstance(condition, ast.Between):
        operands = (condition.operand, condition.low, condition.high)
    elif isinstance(condition, ast.In):
        operands = (condition.operand, *condition.values)
    elif isinstance(condition, ast.Is):
        operands = (condition.path,)
    else:
        operands = (condition.path, condition.argument)
    names = set()
    for operand in operands:
        if isinstance(operand, ast.Path):
            names.add(operand.name)
        elif isinstance(operand, ast.Size):
            names.add(operand.path.name)
    return names


def _value_order(value: AttributeValue) -> tuple[int, Any]:
    """The order DynamoDB keeps key values in: numbers by value, strings and binary by bytes."""
    kind, raw = next(iter(value.items()))
    if kind == "N":
        try:
            return (0, Decimal(raw))
        except InvalidOperation:
            return (0, Decimal(0))
    if kind == "S":
        return (1, raw.encode())
    return (2, str(raw).encode())


def _distinct(values: list[AttributeValue]) -> list[AttributeValue]:
    """`values` without repeats (an IN naming a key twice reads its items once), in order."""
    seen: list[AttributeValue] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


# SELECT ----------------------------------------------------------------------------------------


def plan_select(
    select: ast.Select, parameters: Sequence[AttributeValue], keys: KeyNames
) -> ReadPlan:
    """The requests that read what `select` asks for from the table or index `keys` describes."""
    target = select.target
    conjuncts = ast.conjuncts(select.where)
    partition: list[ast.Value] | None = None
    sort: ast.Condition | None = None
    rest: list[ast.Condition] = []
    by_key = True
    for condition in conjuncts:
        values = _partition_values(condition, keys.partition)
        if values is not None:
            if partition is not None:
                by_key = False  # two conditions on the partition key: read it as a Scan
            partition = values
        elif keys.sort is not None and _is_sort_condition(condition, keys.sort):
            if sort is not None:
                by_key = False
            sort = condition
        else:
            rest.append(condition)
    key_names = {keys.partition, keys.sort} - {None}
    if any(_top_level_names(c) & key_names for c in rest):
        # A Query's filter may not read key attributes: the WHERE is served as a Scan's filter.
        by_key = False
    by_key = by_key and partition is not None and not keys.multi_attribute
    _check_order_by(select, keys, by_key, select.where is not None)

    expressions = _Expressions(parameters)
    base: dict[str, Any] = {"TableName": target.table}
    if target.index is not None:
        base["IndexName"] = target.index
    if select.projection is not None:
        base["ProjectionExpression"] = ", ".join(expressions.path(p) for p in select.projection)

    if not by_key:
        filter_text = expressions.conjunction(conjuncts)
        request = dict(base)
        if filter_text is not None:
            request["FilterExpression"] = filter_text
        return ReadPlan("Scan", target.table, (expressions.into(request),), bool(conjuncts))

    assert partition is not None
    partition_values = _distinct([_bound(v, parameters) for v in partition])
    full_key = sort is not None and isinstance(sort, ast.Comparison) and sort.op == "="
    if keys.sort is None:
        full_key = sort is None
    if full_key and not rest and target.index is None and len(partition_values) == 1:
        key = {keys.partition: partition_values[0]}
        if keys.sort is not None:
            assert isinstance(sort, ast.Comparison)
            sort_value = sort.right if _key_path(sort.left, keys.sort) else sort.left
            assert not isinstance(sort_value, _NOT_VALUES)
            key[keys.sort] = _bound(sort_value, parameters)
        request = dict(base, Key=key)
        if "ProjectionExpression" in request:
            request["ExpressionAttributeNames"] = dict(expressions.names)
        return ReadPlan("GetItem", target.table, (request,), False)

    forward = True
    partition_descending: bool | None = None
    for path, descending in select.order_by:
        if path.name == keys.sort:
            forward = not descending
        else:
            partition_descending = descending
    if partition_descending is not None:
        partition_values.sort(key=_value_order, reverse=partition_descending)
    elif select.order_by and len(partition_values) > 1:
        raise ValidationError(ORDER_BY_SORT_KEY_ACROSS)

    requests = []
    sort_text = None if sort is None else _sort_condition_text(sort, expressions)
    filter_text = expressions.conjunction(rest)
    key_text = f"{expressions.name(keys.partition)} = {_PARTITION_VALUE}"
    for value in partition_values:
        # The requests differ in the partition-key value alone.
        request = dict(base)
        request["KeyConditionExpression"] = (
            key_text if sort_text is None else f"{key_text} AND {sort_text}"
        )
        if filter_text is not None:
            request["FilterExpression"] = filter_text
        if not forward:
            request["ScanIndexForward"] = False
        request = expressions.into(request)
        request["ExpressionAttributeValues"] = {
            **request.get("ExpressionAttributeValues", {}),
            _PARTITION_VALUE: value,
        }
        requests.append(request)
    return ReadPlan("Query", target.table, tuple(requests), bool(rest))


def _check_order_by(select: ast.Select, keys: KeyNames, by_key: bool, has_where: bool) -> None:
    if not select.order_by:
        return
    if not has_where:
        raise ValidationError(ORDER_BY_WHERE)
    for path, _ in select.order_by:
        if not path.is_attribute or path.name not in (keys.partition, keys.sort):
            raise ValidationError(f"{ORDER_BY_KEY}: {ast.render_path(path)}")
    if not by_key:
        raise ValidationError(ORDER_BY_SCAN)


# Writes ----------------------------------------------------------------------------------------


def _key_of(
    where: ast.Condition, keys: KeyNames, parameters: Sequence[AttributeValue]
) -> tuple[dict[str, AttributeValue], list[ast.Condition]]:
    """The full key a write's WHERE names by equalities, and the rest of its conditions."""
    key: dict[str, AttributeValue] = {}
    rest: list[ast.Condition] = []
    for condition in ast.conjuncts(where):
        for name in (keys.partition, keys.sort):
            if name is None or name in key:
                continue
            value = _equality_value(condition, name)
            if value is not None:
                key[name] = _bound(value, parameters)
                break
        else:
            rest.append(condition)
    if len(key) != (1 if keys.sort is None else 2):
        raise ValidationError(KEY_EQUALITY)
    return key, rest


def _write_target(target: ast.Target) -> None:
    if target.index is not None:
        raise ValidationError(WRITE_ON_INDEX)


def plan_insert(
    insert: ast.Insert, parameters: Sequence[AttributeValue], keys: KeyNames
) -> WritePlan:
    _write_target(insert.target)
    item = bind(insert.item, parameters)
    if item is None or set(item) != {"M"} or not isinstance(item["M"], dict):
        raise ValidationError(INSERT_NOT_A_MAP)
    expressions = _Expressions(parameters)
    request = {
        "TableName": insert.target.table,
        "Item": item["M"],
        "ConditionExpression": f"attribute_not_exists({expressions.name(keys.partition)})",
    }
    key = {
        name: item["M"][name]
        for name in (keys.partition, keys.sort)
        if name is not None and name in item["M"]
    }
    return WritePlan("PutItem", insert.target.table, expressions.into(request), key, True)


def _operand_text(operand: ast.Path | ast.Value, expressions: _Expressions) -> str:
    return (
        expressions.path(operand) if isinstance(operand, ast.Path) else expressions.operand(operand)
    )


def plan_update(
    update: ast.Update, parameters: Sequence[AttributeValue], keys: KeyNames
) -> WritePlan:
    _write_target(update.target)
    key, rest = _key_of(update.where, keys, parameters)
    expressions = _Expressions(parameters)
    clauses: dict[str, list[str]] = {"SET": [], "REMOVE": [], "ADD": [], "DELETE": []}
    for action in update.actions:
        path = expressions.path(action.path)
        if isinstance(action, ast.RemoveAction):
            clauses["REMOVE"].append(path)
            continue
        source = action.source
        if isinstance(source, ast.Arithmetic):
            left = _operand_text(source.left, expressions)
            right = _operand_text(source.right, expressions)
            clauses["SET"].append(f"{path} = {left} {source.op} {right}")
        elif isinstance(source, ast.Call):
            if len(source.arguments) != 2:
                raise ValidationError(
                    f"{UPDATE_FUNCTION_ARGUMENTS.format(name=source.name)}, at {source.token.place}"
                )
            first, second = source.arguments
            if source.name == "list_append":
                left = _operand_text(first, expressions)
                right = _operand_text(second, expressions)
                clauses["SET"].append(f"{path} = list_append({left}, {right})")
            else:
                if first != action.path:
                    raise ValidationError(f"{SET_FUNCTION_PATH}, at {source.token.place}")
                clause = "ADD" if source.name == "set_add" else "DELETE"
                clauses[clause].append(f"{path} {_operand_text(second, expressions)}")
        elif isinstance(source, ast.Path):
            clauses["SET"].append(f"{path} = {expressions.path(source)}")
        elif bind(source, parameters) is None:
            clauses["REMOVE"].append(path)  # SET a = MISSING takes the attribute away
        else:
            clauses["SET"].append(f"{path} = {expressions.operand(source)}")
    update_text = " ".join(
        f"{clause} {', '.join(actions)}" for clause, actions in clauses.items() if actions
    )
    exists = f"attribute_exists({expressions.name(keys.partition)})"
    condition = expressions.conjunction(rest)
    request: dict[str, Any] = {
        "TableName": update.target.table,
        "Key": key,
        "UpdateExpression": update_text,
        "ConditionExpression": exists if condition is None else f"{exists} AND ({condition})",
    }
    if update.returning is not None:
        request["ReturnValues"] = update.returning
    return WritePlan("UpdateItem", update.target.table, expressions.into(request), key, False)


def plan_delete(
    delete: ast.Delete, parameters: Sequence[AttributeValue], keys: KeyNames
) -> WritePlan:
    _write_target(delete.target)
    key, rest = _key_of(delete.where, keys, parameters)
    expressions = _Expressions(parameters)
    request: dict[str, Any] = {"TableName": delete.target.table, "Key": key}
    condition = expressions.conjunction(rest)
    if condition is not None:
        request["ConditionExpression"] = condition
    if delete.returning is not None:
        request["ReturnValues"] = delete.returning
    return WritePlan("DeleteItem", delete.target.table, expressions.into(request), key, False)


def plan_exists(
    exists: ast.Exists, parameters: Sequence[AttributeValue], keys: KeyNames
) -> WritePlan:
    """EXISTS(SELECT ...): a ConditionCheck that the item the SELECT names exists and matches."""
    select = exists.select
    _write_target(select.target)
    if select.where is None:
        raise ValidationError(KEY_EQUALITY)
    key, rest = _key_of(select.where, keys, parameters)
    expressions = _Expressions(parameters)
    present = f"attribute_exists({expressions.name(keys.partition)})"
    condition = expressions.conjunction(rest)
    request: dict[str, Any] = {
        "TableName": select.target.table,
        "Key": key,
        "ConditionExpression": present if condition is None else f"{present} AND ({condition})",
    }
    return WritePlan("ConditionCheck", select.target.table, expressions.into(request), key, False)


def plan(
    statement: ast.Statement, parameters: Sequence[AttributeValue] | None, keys: KeyNames
) -> Plan:
    """The requests `statement` means, bound to `parameters`, against a table keyed by `keys`."""
    check_parameters(statement, parameters)
    bound = list(parameters or ())
    if isinstance(statement, ast.Select):
        return plan_select(statement, bound, keys)
    if isinstance(statement, ast.Insert):
        return plan_insert(statement, bound, keys)
    if isinstance(statement, ast.Update):
        return plan_update(statement, bound, keys)
    if isinstance(statement, ast.Delete):
        return plan_delete(statement, bound, keys)
    return plan_exists(statement, bound, keys)

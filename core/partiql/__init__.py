"""DynamoDB's PartiQL: statements parsed, checked and planned as the operations dynalab has.

The facade the router uses::

    parse(text) -> ast.Statement          (cached per text; ValidationError with DynamoDB's text)
    plan(statement, parameters, keys)     -> ReadPlan | WritePlan (`core.partiql.planner`)
    KeyNames(partition, sort)             the key of the table or index a statement names

A statement is tokenized keeping each token's line and column (`tokens`), parsed by recursive
descent into frozen trees (`parser`, `ast`), and planned into requests of the low-level API in
wire JSON (`planner`): a SELECT into a GetItem, Queries or a Scan, a write into a PutItem,
UpdateItem or DeleteItem (or a transaction's ConditionCheck). Everything here is pure; the
router runs the plans on its existing handlers, so PartiQL gets their checks, paging, capacity
and errors unchanged.
"""

from __future__ import annotations

from functools import lru_cache

from core import limits
from core.errors import ValidationError
from core.partiql import ast
from core.partiql.parser import parse as _parse
from core.partiql.planner import KeyNames, Plan, ReadPlan, WritePlan, check_parameters, plan

__all__ = [
    "KeyNames",
    "Plan",
    "ReadPlan",
    "WritePlan",
    "ast",
    "check_parameters",
    "parse",
    "plan",
]


@lru_cache(maxsize=limits.PARTIQL_PARSE_CACHE_ENTRIES)
def _parse_cached(text: str) -> ast.Statement | str:
    try:
        return _parse(text)
    except ValidationError as error:
        assert error.message is not None
        return error.message


def parse(text: str) -> ast.Statement:
    """The statement `text` holds (parsed once per distinct text); raises ValidationError."""
    parsed = _parse_cached(text)
    if isinstance(parsed, str):
        raise ValidationError(parsed)
    return parsed

"""Reading and checking data-plane request parameters the way DynamoDB's front end does.

DynamoDB checks a request in three passes, and the router follows them:

1. The JSON body is deserialised against the operation's input shape. A member of the wrong JSON
   type stops the request with a SerializationException naming the token it found ("STRING_VALUE
   cannot be converted to Integer"); JSON null means the member is absent. `router.shapes` does
   this for the whole body, from the service model, before any handler runs.
2. Every member is checked against the constraints of the service model (not null, length, range,
   enum, pattern) and all violations are reported together: "2 validation errors detected: Value
   '0' at 'limit' failed to satisfy constraint: ...; Value ...".
3. The operation's own rules (expressions, keys against the schema, Select with projections, batch
   sizes) run next, each failing on the first error with its own message.

`RequestReader` implements the second pass over a body the first has accepted, so its accessors
can trust every member's JSON type; the functions after it are the third-pass rules that several
handlers share. Nothing here does IO: handlers read and check everything they can before they look
up the table or call a node, so an invalid request never writes anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from core import expressions, limits, schema, table_arns, values
from core.catalog import IndexDef
from core.errors import AccessDenied, ValidationError
from router.protocol import ACCOUNT_ID, request_region
from router.routing import Route

# Enum members in the order DynamoDB lists them in "Member must satisfy enum value set" messages.
RETURN_VALUES = ("ALL_NEW", "UPDATED_OLD", "ALL_OLD", "NONE", "UPDATED_NEW")
RETURN_VALUES_ON_FAILURE = ("ALL_OLD", "NONE")
RETURN_CONSUMED_CAPACITY = ("INDEXES", "TOTAL", "NONE")
RETURN_ITEM_COLLECTION_METRICS = ("SIZE", "NONE")
CONDITIONAL_OPERATORS = ("OR", "AND")
SELECT_VALUES = ("SPECIFIC_ATTRIBUTES", "COUNT", "ALL_ATTRIBUTES", "ALL_PROJECTED_ATTRIBUTES")

# PutItem and DeleteItem can only return the item as it was: there is no "new" or "updated" image.
RETURN_VALUES_OLD_ONLY = ("NONE", "ALL_OLD")

# Table and index names: 3 to 255 characters of [a-zA-Z0-9_.-] (Developer Guide, naming rules).
NAME_PATTERN = "[a-zA-Z0-9_.-]+"


def shown(value: Any) -> str:
    """A value the way DynamoDB's (Java) validator prints it inside "Value '...' at '...'"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def _lower_first(member: str) -> str:
    return member[:1].lower() + member[1:]


class RequestReader:
    """Reads the members of one JSON object of a request (the body, or a nested structure).

    The body has passed `router.shapes.deserialize`, so every member has its shape's JSON type.
    Each accessor records constraint violations (pass 2) to be raised together by `check()`. A
    reader for a nested structure shares its parent's violation list and prefixes its paths, as
    DynamoDB's messages do ("requestItems.Music.member.keys").
    """

    def __init__(self, body: Any, *, path: str = "", violations: list[str] | None = None) -> None:
        assert isinstance(body, dict), "router.shapes deserialises every structure first"
        self.body: dict[str, Any] = body
        self.path = path
        self.violations: list[str] = violations if violations is not None else []
        # An ARN of another account: refused once the request's validation errors are reported,
        # shared with nested readers as the violations are.
        self.denied: list[str] = []

    def nested(self, body: Any, path: str) -> RequestReader:
        """A reader for a structure inside this one, reporting into the same violation list."""
        nested = RequestReader(body, path=path, violations=self.violations)
        nested.denied = self.denied
        return nested

    def present(self, member: str) -> bool:
        return self.body.get(member) is not None

    def where(self, member: str) -> str:
        name = _lower_first(member)
        return f"{self.path}.{name}" if self.path else name

    def violation(self, member: str, value: Any, constraint: str) -> None:
        """Record that `member` holding `value` failed `constraint` (DynamoDB's wording)."""
        text = "null" if value is None else f"'{shown(value)}'"
        self.violations.append(
            f"Value {text} at '{self.where(member)}' failed to satisfy constraint: {constraint}"
        )

    def _required(self, member: str, required: bool) -> bool:
        """True when the member is there; records a violation when it is required but missing."""
        if self.body.get(member) is not None:
            return True
        if required:
            self.violation(member, None, "Member must not be null")
        return False

    def _length(self, member: str, value: Any, size: int, lo: int | None, hi: int | None) -> None:
        if lo is not None and size < lo:
            self.violation(member, value, f"Member must have length greater than or equal to {lo}")
        if hi is not None and size > hi:
            self.violation(member, value, f"Member must have length less than or equal to {hi}")

    # Scalars ----------------------------------------------------------------------------------

    def string(
        self,
        member: str,
        *,
        required: bool = False,
        enum: tuple[str, ...] | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        pattern: str | None = None,
    ) -> str | None:
        """A String member, or None when absent."""
        if not self._required(member, required):
            return None
        value: str = self.body[member]
        if enum is not None and value not in enum:
            self.violation(
                member, value, f"Member must satisfy enum value set: [{', '.join(enum)}]"
            )
        if pattern is not None and not re.fullmatch(pattern, value):
            self.violation(
                member, value, f"Member must satisfy regular expression pattern: {pattern}"
            )
        self._length(member, value, len(value), min_length, max_length)
        return value

    def name(self, member: str, *, required: bool = False) -> str | None:
        """A table or index name: 3 to 255 characters of [a-zA-Z0-9_.-]."""
        return self.string(
            member,
            required=required,
            pattern=NAME_PATTERN,
            min_length=limits.TABLE_NAME_CHARS_MIN,
            max_length=limits.TABLE_NAME_CHARS_MAX,
        )

    def table_name(self, member: str = "TableName", *, required: bool = False) -> str | None:
        """A TableName: a table's name, or its ARN (`core.table_arns`), or None when absent.

        The value comes back as the client wrote it, since replies name the table as the request
        did; `core.table_arns.table_name_of` gives the table's name. A name is checked as `name`
        checks it; an ARN against the TableArn shape's length and then as an ARN of this
        request's Region and dynalab's account.
        """
        value = self.body.get(member)
        if value is None or not table_arns.is_arn(value):
            return self.name(member, required=required)
        self.check_table_arn(member, value)
        return str(value)

    def check_table_arn(self, member: str, arn: str) -> None:
        """Record what is wrong with `arn` as the table of `member` (a TableName, or a key of
        RequestItems) with this request's violations."""
        if len(arn) > limits.TABLE_ARN_CHARS_MAX:
            self._length(member, arn, len(arn), None, limits.TABLE_ARN_CHARS_MAX)
            return
        violation = table_arns.arn_violation(arn, request_region(), ACCOUNT_ID)
        if violation is None:
            return
        if violation.constraint is not None:
            self.violation(member, arn, violation.constraint)
        elif violation.text is not None:
            self.violations.append(violation.text)
        else:
            self.denied.append(arn)

    def integer(
        self, member: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        """An Integer member, or None when absent."""
        if not self._required(member, False):
            return None
        # A fractional JSON number is truncated by the deserialiser, as Java's intValue() does.
        value = int(self.body[member])
        if minimum is not None and value < minimum:
            self.violation(
                member, value, f"Member must have value greater than or equal to {minimum}"
            )
        if maximum is not None and value > maximum:
            self.violation(member, value, f"Member must have value less than or equal to {maximum}")
        return value

    def boolean(self, member: str) -> bool | None:
        """A Boolean member, or None when absent."""
        if not self._required(member, False):
            return None
        value: bool = self.body[member]
        return value

    # Containers -------------------------------------------------------------------------------

    def mapping(
        self,
        member: str,
        *,
        required: bool = False,
        min_length: int | None = None,
        max_length: int | None = None,
    ) -> dict[str, Any] | None:
        """A Map member (a JSON object), or None when absent."""
        if not self._required(member, required):
            return None
        value: dict[str, Any] = self.body[member]
        self._length(member, value, len(value), min_length, max_length)
        return value

    def array(
        self,
        member: str,
        *,
        required: bool = False,
        min_length: int | None = None,
        max_length: int | None = None,
    ) -> list[Any] | None:
        """A List member (a JSON array), or None when absent."""
        if not self._required(member, required):
            return None
        value: list[Any] = self.body[member]
        self._length(member, value, len(value), min_length, max_length)
        return value

    def string_list(
        self,
        member: str,
        *,
        required: bool = False,
        min_length: int | None = None,
        max_length: int | None = None,
        member_length: tuple[int, int] | None = None,
    ) -> list[str] | None:
        """A List of Strings, or None when absent.

        `member_length` bounds each string's length (min, max); DynamoDB states a list's member
        constraints once for the whole list, not per element.
        """
        strings: list[str] | None = self.array(
            member, required=required, min_length=min_length, max_length=max_length
        )
        if strings is not None and member_length is not None:
            lo, hi = member_length
            if not all(lo <= len(string) <= hi for string in strings):
                self.violation(
                    member,
                    strings,
                    "Member must satisfy constraint: [Member must have length less than or "
                    f"equal to {hi}, Member must have length greater than or equal to {lo}]",
                )
        return strings

    def string_map(self, member: str) -> dict[str, str] | None:
        """A Map of String to String, or None when absent."""
        return self.mapping(member)

    def attribute_map(self, member: str, *, required: bool = False) -> dict[str, Any] | None:
        """A Map of attribute name to AttributeValue (an item or a key), or None when absent.

        Its values are validated by `core.values` in pass 3.
        """
        return self.mapping(member, required=required)

    def check(self) -> None:
        """Raise every constraint violation recorded so far as one ValidationError; then, with
        none, refuse a table ARN of another account."""
        if not self.violations:
            if self.denied:
                raise AccessDenied(table_arns.ACCESS_DENIED)
            return
        count = len(self.violations)
        noun = "error" if count == 1 else "errors"
        raise ValidationError(f"{count} validation {noun} detected: " + "; ".join(self.violations))


def read_table_name(reader: RequestReader) -> str | None:
    """The TableName of a table operation (CreateTable, DescribeTable, UpdateTable, DeleteTable)
    as written: a name, checked against the pattern, or an ARN, checked as an ARN. Its presence
    and a name's length are checked by `table_name_checked`, which DynamoDB reports alone."""
    value = reader.body.get("TableName")
    if value is not None and table_arns.is_arn(value):
        reader.check_table_arn("TableName", value)
        return str(value)
    return reader.string("TableName", pattern=NAME_PATTERN)


def table_name_checked(value: str | None) -> str:
    """The name of the table `read_table_name` read, refusing a missing TableName or a name of
    the wrong length on their own (`core.schema.check_table_name`); an ARN's name was checked
    with the ARN."""
    if value is not None and table_arns.is_arn(value):
        return table_arns.table_name_of(value)
    return schema.check_table_name(value)


# Shared third-pass rules ---------------------------------------------------------------------


def read_common(reader: RequestReader) -> None:
    """Check ReturnConsumedCapacity, which every data-plane operation may carry, against its enum.

    A typo is reported as DynamoDB reports it. The handlers read the checked value from the body
    (`router.items.capacity_mode`) once the request has passed. ReturnItemCollectionMetrics is
    checked where it is allowed; the reply omits ItemCollectionMetrics until LSIs exist.
    """
    reader.string("ReturnConsumedCapacity", enum=RETURN_CONSUMED_CAPACITY)


def check_return_values(return_values: str | None, allowed: tuple[str, ...]) -> str:
    """The ReturnValues to use (NONE when absent), rejecting a value this operation cannot return.

    The enum itself was checked by the reader; PutItem and DeleteItem accept only NONE and ALL_OLD,
    and DynamoDB words that rejection differently from an enum violation.
    """
    if return_values is None:
        return "NONE"
    if return_values not in allowed:
        raise ValidationError("Return values set to invalid value")
    return return_values


def select_mode(
    select: str | None,
    *,
    projection: bool,
    attributes_to_get: bool,
    index_name: str | None,
) -> str:
    """The Select a Query or Scan runs with, enforcing DynamoDB's combination rules.

    Without Select, a projection means SPECIFIC_ATTRIBUTES and otherwise ALL_ATTRIBUTES on a
    table, ALL_PROJECTED_ATTRIBUTES on an index. A projection contradicts ALL_ATTRIBUTES,
    ALL_PROJECTED_ATTRIBUTES and COUNT; SPECIFIC_ATTRIBUTES needs a projection;
    ALL_PROJECTED_ATTRIBUTES needs an index.
    """
    if select is None:
        if projection or attributes_to_get:
            return "SPECIFIC_ATTRIBUTES"
        # "ALL_ATTRIBUTES when accessing a table, and ALL_PROJECTED_ATTRIBUTES when accessing
        # an index" (API Reference, Query's Select).
        return "ALL_ATTRIBUTES" if index_name is None else "ALL_PROJECTED_ATTRIBUTES"
    if select != "SPECIFIC_ATTRIBUTES":
        chosen = "only the Count" if select == "COUNT" else select
        if attributes_to_get:
            raise ValidationError(
                f"Cannot specify the AttributesToGet when choosing to get {chosen}"
            )
        if projection:
            raise ValidationError(
                f"Cannot specify the ProjectionExpression when choosing to get {chosen}"
            )
    elif not (projection or attributes_to_get):
        raise ValidationError(
            "Must specify the AttributesToGet or ProjectionExpression when choosing to get "
            "SPECIFIC_ATTRIBUTES"
        )
    if select == "ALL_PROJECTED_ATTRIBUTES" and index_name is None:
        raise ValidationError(
            "ALL_PROJECTED_ATTRIBUTES can be used only when Querying using an IndexName"
        )
    return select


def key_identity(key: Mapping[str, Any]) -> tuple[Any, ...]:
    """A hashable identity of a validated key item, for finding duplicates in a batch.

    Values are normalised by `core.values` (numbers canonical, binaries canonical base64), so
    equal keys have equal identities whatever their spelling in the request.
    """
    return tuple(
        sorted(
            (name, tag, _hashable(value[tag]))
            for name, value in key.items()
            for tag in (values.type_of(value),)
        )
    )


def _hashable(raw: Any) -> Any:
    """A key value's payload as a hashable: a scalar's is one already; a list, map or set's (not
    a key type, which the key's schema check refuses later) is its canonical JSON."""
    if isinstance(raw, (str, bool)):
        return raw
    return orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)


def check_conditional_operator(
    conditional_operator: str | None, conditions: dict[str, Any] | None
) -> None:
    """ConditionalOperator joins the conditions of Expected, QueryFilter or ScanFilter.

    DynamoDB refuses it without such a map, and with a map of one condition (nothing to join).
    """
    if conditional_operator is None:
        return
    if not conditions:
        raise ValidationError("ConditionalOperator cannot be used without Filter or Expected")
    if len(conditions) < 2:
        raise ValidationError(
            "ConditionalOperator can only be used when Filter or Expected has two or more elements"
        )


def check_index(index_name: str | None, table: Route) -> IndexDef | None:
    """The secondary index an IndexName names in `table` (None without an IndexName), or
    DynamoDB's answer for a table without that index."""
    if index_name is None:
        return None
    index = table.indexes.get(index_name)
    if index is None:
        raise ValidationError(f"The table does not have the specified index: {index_name}")
    return index


def check_key_paths(
    key_names: tuple[str, ...], *compiled: expressions.Condition | expressions.Projection | None
) -> None:
    """Refuse a projection or filter that reaches into a key attribute (`pk.a`, `pk[0]`).

    Key attributes are scalars, and DynamoDB says so once it knows the table's key schema, partition
    key first.
    """
    for name in key_names:
        if any(c is not None and name in c.nested_attributes for c in compiled):
            raise ValidationError(
                "Key attributes must be scalars; list random access '[]' and map lookup '.' are "
                f"not allowed: Key: {name}"
            )

"""What a single-item write does, decided without touching storage: plan -> `WriteEffect`.

A write is two steps. `plan` is this module: given the request, the item as it is now (or None)
and the table's `KeyShape`, it evaluates the condition, applies the update expression, checks the
new item's size and computes ReturnValues and the write units, and returns a `WriteEffect` that
says all of it: the old and new images, the change kind, both sizes, the units, the attributes to
return, or that the condition failed. `apply` is the storage node's one hook that turns an effect
into storage writes (the item, its change record, the partition's counters, and later LSI entries
and the TTL index), so every rule of *what* a write does lives here and every rule of *how* it is
stored lives there. Replication will slot in between: the leader plans, every replica applies.

DynamoDB's rules, as the Developer Guide and API Reference state them:

- A failed condition changes nothing but still consumes write units, sized by the existing item;
  with ReturnValuesOnConditionCheckFailure=ALL_OLD the error carries that item.
- UpdateItem on a missing item creates it from its key, then applies the update, unless every
  action of the update only takes something away (REMOVE, DELETE from a set, or the legacy
  AttributeUpdates DELETE): then there is nothing to remove, no item is created and nothing is
  returned, whatever ReturnValues asks. An update may not set or remove a key attribute.
- PutItem and DeleteItem return only ALL_OLD; UpdateItem also UPDATED_OLD, ALL_NEW, UPDATED_NEW.
- A write consumes one unit per started KB of the larger of the old and the new item.
- A write that leaves the item exactly as it was is no change: like DynamoDB Streams, it records
  nothing (its `kind` is None), but it is still acknowledged and charged.

Planning raises only typed errors (`ValidationError` for an item too large or an update of a key
attribute; expression evaluation errors); anything else is a bug in the write, which the node
reports for that write alone. Nothing here does IO or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core import expressions, limits
from core.capacity import item_write_units
from core.errors import INVALID_PARAMETERS, ConditionalCheckFailed, ValidationError
from core.keys import KeyShape
from core.size import item_size_bytes
from core.values import Item, equal

RETURN_NONE = "NONE"
RETURN_ALL_OLD = "ALL_OLD"


class ChangeKind(StrEnum):
    """What a write did to its item, as DynamoDB Streams names it."""

    INSERT = "INSERT"
    MODIFY = "MODIFY"
    REMOVE = "REMOVE"


@dataclass(frozen=True, slots=True)
class PutRequest:
    """PutItem: replace the item (whose key it carries), optionally under a condition."""

    item: Item
    condition: expressions.Condition | None = None
    return_values: str = RETURN_NONE  # NONE | ALL_OLD
    return_on_failure: bool = False  # ReturnValuesOnConditionCheckFailure=ALL_OLD


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """UpdateItem: change (or create) the item with `key`, optionally under a condition."""

    key: Item
    update: expressions.Update | None = None
    condition: expressions.Condition | None = None
    return_values: str = RETURN_NONE  # NONE | ALL_OLD | UPDATED_OLD | ALL_NEW | UPDATED_NEW
    return_on_failure: bool = False


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """DeleteItem: remove the item with `key`, optionally under a condition."""

    key: Item
    condition: expressions.Condition | None = None
    return_values: str = RETURN_NONE  # NONE | ALL_OLD
    return_on_failure: bool = False


WriteRequest = PutRequest | UpdateRequest | DeleteRequest


@dataclass(frozen=True, slots=True)
class WriteEffect:
    """Everything one planned write does, before anything is stored.

    When `condition_failed` is set nothing changes (`new` is `old`) and `units` are what the
    failed check consumes; `failure()` is the error to answer with.
    """

    key: Item
    old: Item | None
    new: Item | None
    old_bytes: int
    new_bytes: int
    units: float
    attributes: Item | None  # ReturnValues; None when there is nothing to return
    condition_failed: bool = False
    return_on_failure: bool = False

    @property
    def kind(self) -> ChangeKind | None:
        """The change this write makes; None when it leaves the item as it was."""
        if self.condition_failed or _same_item(self.new, self.old):
            return None
        if self.new is None:
            return ChangeKind.REMOVE
        return ChangeKind.INSERT if self.old is None else ChangeKind.MODIFY

    def failure(self) -> ConditionalCheckFailed:
        """The error of a failed condition, with the item as it was if the client asked for it."""
        assert self.condition_failed
        return ConditionalCheckFailed(item=self.old if self.return_on_failure else None)

    def reply(self) -> dict[str, object]:
        """The node's reply for an applied write: returned attributes and both sizes."""
        assert not self.condition_failed
        return {
            "attributes": self.attributes,
            "old_bytes": self.old_bytes,
            "new_bytes": self.new_bytes,
        }


def _same_item(a: Item | None, b: Item | None) -> bool:
    """Whether two images are the same item in DynamoDB's eyes (sets compare without order)."""
    if a is None or b is None:
        return a is b
    if a == b:  # The common case, compared in C; only sets need DynamoDB's equality below.
        return True
    return a.keys() == b.keys() and all(a[name] == b[name] or equal(a[name], b[name]) for name in a)


def plan(
    request: WriteRequest, old: Item | None, shape: KeyShape, *, old_bytes: int | None = None
) -> WriteEffect:
    """The effect of `request` on the item `old` (None: there is none) of a table keyed `shape`.

    The request's key values have been checked against `shape` by the router; the item `old` is
    the one stored under that key. `old_bytes` is its DynamoDB size when the caller already knows
    it (a node stores each item's size beside it); without it the size is measured here.
    """
    if old_bytes is None:
        old_bytes = 0 if old is None else item_size_bytes(old)
    if isinstance(request, PutRequest):
        return _plan_put(request, old, old_bytes, shape)
    if isinstance(request, UpdateRequest):
        return _plan_update(request, old, old_bytes, shape)
    return _plan_delete(request, old, old_bytes, shape)


def _failed_condition(
    condition: expressions.Condition | None,
    key: Item,
    old: Item | None,
    old_bytes: int,
    return_on_failure: bool,
) -> WriteEffect | None:
    """The effect of a failed condition, or None when there is no condition or it holds."""
    if condition is None or condition.evaluate(old):
        return None
    return WriteEffect(
        key=key,
        old=old,
        new=old,
        old_bytes=old_bytes,
        new_bytes=old_bytes,
        units=item_write_units(old_bytes, None),
        attributes=None,
        condition_failed=True,
        return_on_failure=return_on_failure,
    )


def _plan_put(
    request: PutRequest, old: Item | None, old_bytes: int, shape: KeyShape
) -> WriteEffect:
    key = shape.key_of(request.item)
    # DynamoDB refuses an oversized item before it looks at the stored one.
    new_bytes = item_size_bytes(request.item)
    if new_bytes > limits.ITEM_SIZE_BYTES_MAX:
        raise ValidationError("Item size has exceeded the maximum allowed size")
    failed = _failed_condition(request.condition, key, old, old_bytes, request.return_on_failure)
    if failed is not None:
        return failed
    return WriteEffect(
        key=key,
        old=old,
        new=request.item,
        old_bytes=old_bytes,
        new_bytes=new_bytes,
        units=item_write_units(old_bytes, new_bytes),
        attributes=old if request.return_values == RETURN_ALL_OLD else None,
    )


def _plan_update(
    request: UpdateRequest, old: Item | None, old_bytes: int, shape: KeyShape
) -> WriteEffect:
    key = shape.key_of(request.key)
    update = request.update
    if update is not None:
        for name in shape.names:
            if name in update.top_level_attributes:
                raise ValidationError(
                    INVALID_PARAMETERS
                    + f"Cannot update attribute {name}. This attribute is part of the key"
                )
    failed = _failed_condition(request.condition, key, old, old_bytes, request.return_on_failure)
    if failed is not None:
        return failed
    if old is None and update is not None and update.only_removes:
        # Nothing to remove from an item that is not there, so nothing is created (nested paths
        # included: "REMOVE a.b[2]" on a missing item is not an invalid path).
        return WriteEffect(
            key=key,
            old=None,
            new=None,
            old_bytes=0,
            new_bytes=0,
            units=item_write_units(0, 0),
            attributes=None,
        )
    # UpdateItem on a missing item creates it from its key, then applies the update.
    base = dict(key) if old is None else old
    new = base if update is None else update.apply(base)
    new_bytes = item_size_bytes(new)
    if new_bytes > limits.ITEM_SIZE_BYTES_MAX:
        raise ValidationError("Item size to update has exceeded the maximum allowed size")
    return WriteEffect(
        key=key,
        old=old,
        new=new,
        old_bytes=old_bytes,
        new_bytes=new_bytes,
        units=item_write_units(old_bytes, new_bytes),
        attributes=_update_return_values(request.return_values, update, old, new),
    )


def _plan_delete(
    request: DeleteRequest, old: Item | None, old_bytes: int, shape: KeyShape
) -> WriteEffect:
    key = shape.key_of(request.key)
    failed = _failed_condition(request.condition, key, old, old_bytes, request.return_on_failure)
    if failed is not None:
        return failed
    return WriteEffect(
        key=key,
        old=old,
        new=None,
        old_bytes=old_bytes,
        new_bytes=0,
        units=item_write_units(old_bytes, 0),
        attributes=old if request.return_values == RETURN_ALL_OLD else None,
    )


def _update_return_values(
    return_values: str, update: expressions.Update | None, old: Item | None, new: Item
) -> Item | None:
    """UpdateItem's Attributes for its ReturnValues; None when there is nothing to return."""
    if update is not None:
        return update.returned_attributes(old, new, return_values)
    # Without an UpdateExpression nothing is updated: only the whole images can be returned.
    return {"ALL_OLD": old, "ALL_NEW": new}.get(return_values)

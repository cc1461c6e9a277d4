"""Reading document paths out of items, and projecting items onto a list of paths.

Items are DynamoDB JSON (``{"a": {"M": {"b": {"L": [...]}}}}``); a resolved path is a tuple of
attribute names and list indexes whose first element is always a name. A path that leads through a
missing attribute, a non-map, a non-list or an index past the end of a list resolves to nothing, as
in DynamoDB, where such an operand is simply absent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from core.expressions.binding import ResolvedPath
from core.values import AttributeValue, Item

Getter = Callable[[Item], AttributeValue | None]


def get_path(item: Item, path: ResolvedPath) -> AttributeValue | None:
    first = path[0]
    assert isinstance(first, str)
    value = item.get(first)
    for step in path[1:]:
        if value is None:
            return None
        if isinstance(step, int):
            elements = value.get("L")
            if elements is None or step >= len(elements):
                return None
            value = elements[step]
        else:
            members = value.get("M")
            if members is None:
                return None
            value = members.get(step)
    return value


def make_getter(path: ResolvedPath) -> Getter:
    """A function reading ``path`` out of an item; top-level names get the cheapest possible one."""
    if len(path) == 1:
        name = path[0]
        assert isinstance(name, str)

        def top_level(item: Item) -> AttributeValue | None:
            return item.get(name)

        return top_level

    def nested(item: Item) -> AttributeValue | None:
        return get_path(item, path)

    return nested


def clone(value: Any) -> Any:
    """A deep copy of a DynamoDB JSON value (dicts, lists and immutable leaves only)."""
    if isinstance(value, dict):
        return {key: clone(member) for key, member in value.items()}
    if isinstance(value, list):
        return [clone(member) for member in value]
    return value


class _MapNode(dict[str, Any]):
    """A map being assembled by ``project``."""


class _ListNode(dict[int, Any]):
    """A list being assembled by ``project``, keyed by the source index."""


def project(item: Item, paths: Iterable[ResolvedPath]) -> Item:
    """The parts of ``item`` at ``paths``, with nesting kept and list elements kept in index order.

    DynamoDB returns a projected list element inside its list, and several projected elements of
    one list in the order of their indexes, without placeholders for the elements left out: for
    ``a[2], a[0]`` on ``[x, y, z]`` it returns ``{"a": {"L": [x, z]}}``. The paths must not overlap
    (a projection expression that has overlapping paths is rejected before it gets here).
    """
    root = _MapNode()
    for path in paths:
        value = get_path(item, path)
        if value is None:
            continue
        # Containers are keyed by the path's own elements (names in maps, indexes in lists).
        container: dict[Any, Any] = root
        for step, following in itertools.pairwise(path):
            child = container.get(step)
            if child is None:
                child = _ListNode() if isinstance(following, int) else _MapNode()
                container[step] = child
            container = child
        container[path[-1]] = clone(value)
    return {name: _build(node) for name, node in root.items()}


def _build(node: Any) -> AttributeValue:
    if isinstance(node, _MapNode):
        return {"M": {name: _build(child) for name, child in node.items()}}
    if isinstance(node, _ListNode):
        return {"L": [_build(node[index]) for index in sorted(node)]}
    result: AttributeValue = node
    return result

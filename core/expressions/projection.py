"""Projection expressions: checking their paths as DynamoDB does.

A projection names the document paths to return; like an update it may not name overlapping
(``a, a.b``) or conflicting (``a.b, a[0]``) paths, and DynamoDB reports those with the same words.
Applying a projection is ``core.expressions.document.project``.
"""

from __future__ import annotations

from core.expressions import ast
from core.expressions.binding import Binder, ResolvedPath
from core.expressions.update import check_paths


def check_projection(tree: ast.ProjectionExpression, binder: Binder) -> list[ResolvedPath]:
    """Record every problem of a projection in ``binder``; return its resolved paths."""
    resolved = [binder.path(path) for path in tree.paths]
    paths = [path for path in resolved if path is not None]
    check_paths(paths, binder)
    return paths

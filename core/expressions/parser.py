"""Parsers for condition, update and projection expressions.

Each public ``parse_*`` function turns text into a tree from ``core.expressions.ast`` or raises
``ExpressionSyntaxError`` with DynamoDB's "Syntax error; token: ..., near: ..." words. Problems that
DynamoDB reports only after a successful parse (a reserved word used as a name, doubled parentheses,
an update clause used twice, too many operators) do not stop the parse: they are returned as
``Deferred`` findings, because DynamoDB ranks them against the checks that need the request's
ExpressionAttributeNames and ExpressionAttributeValues and reports only the first in its order.

Grammar (keywords are case-insensitive; function names are case-sensitive, as in DynamoDB)::

    condition  := or EOF
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | comparison
    comparison := primary [comparator operand | "BETWEEN" operand "AND" operand
                           | "IN" "(" operand ("," operand)* ")"]
    primary    := "(" or ")" | atom            -- either a condition or an operand
    operand    := "(" operand ")" | atom
    atom       := path | ":value" | name "(" operand ("," operand)* ")"
    path       := (name | "#name") ("." (name | "#name") | "[" integer "]")*

    update     := clause+ EOF, clause := "SET" set ("," set)* | "REMOVE" path ("," path)*
                  | "ADD" path ":value" ("," ...)* | "DELETE" path ":value" ("," ...)*
    set        := path "=" value,  value := term [("+" | "-") operand]
    term       := "(" value ")" | atom

    projection := path ("," path)* EOF

A parenthesised group is either a condition or an operand, which is only known after its contents,
so ``primary`` parses the contents with the full condition grammar and lets the caller decide: an
operand must be followed by a comparator, BETWEEN or IN, a condition must not.

The productions that nest (parenthesised conditions, NOT, function calls, groups of operands and
of SET values) keep their nesting on explicit stacks, never on Python's: DynamoDB bounds an
expression only by its 4 KB and its 300 operators, so 299 ``NOT (`` levels are valid, and 2,000
doubled parentheses must parse before they are refused as redundant. Paths, operands and
comparisons, which do not nest, are plain methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn, cast

from core import limits
from core.expressions import ast
from core.expressions.reserved import RESERVED_WORDS
from core.expressions.tokens import (
    ATTR_NAME,
    ATTR_VALUE,
    BAD,
    EOF,
    INTEGER,
    NAME,
    Token,
    syntax_error_message,
    tokenize,
)

COMPARATORS = frozenset({"=", "<>", "<", "<=", ">", ">="})
# DynamoDB's functions ("These function names are case-sensitive"): those of condition and filter
# expressions, and those of update expressions. Each kind refuses the other's as "not allowed".
CONDITION_FUNCTIONS = frozenset(
    {
        "attribute_exists",
        "attribute_not_exists",
        "attribute_type",
        "begins_with",
        "contains",
        "size",
    }
)
UPDATE_FUNCTIONS = frozenset({"if_not_exists", "list_append"})
FUNCTIONS = CONDITION_FUNCTIONS | UPDATE_FUNCTIONS
_CONDITION_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN"})
_UPDATE_KEYWORDS = frozenset({"SET", "REMOVE", "ADD", "DELETE"})

# Finding categories, reported by DynamoDB in a fixed order per expression kind (see analysis).
LIMIT = "limit"
PARENS = "parens"
RESERVED = "reserved"
SECTION = "section"


class ExpressionSyntaxError(Exception):
    """The text is not an expression of the requested kind; ``message`` is DynamoDB's wording."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Deferred:
    """A problem found while parsing that DynamoDB reports only after ranking it (module doc)."""

    category: str
    message: str


@dataclass(frozen=True, slots=True)
class Parsed:
    """A successful parse: the tree, deferred findings and the placeholders the text mentions."""

    tree: ast.Condition | ast.UpdateExpression | ast.ProjectionExpression
    findings: tuple[Deferred, ...]
    names_used: frozenset[str]
    values_used: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Group:
    """A parenthesised group while parsing; it lets ``((x))`` be recognised as redundant."""

    inner: ast.Condition | ast.Operand


_Node = ast.Condition | ast.Operand | _Group


@dataclass(slots=True)
class _Context:
    """The whole condition or one parenthesised condition while it is parsed: the NOTs read before
    its current term, and the left operands of an AND and an OR waiting for their right one."""

    nots: int = 0
    and_left: ast.Condition | None = None
    or_left: ast.Condition | None = None


@dataclass(slots=True)
class _CallFrame:
    """A function call whose arguments are being read, and the groups opened before its name."""

    name: str
    opened: int
    args: list[ast.Operand] = field(default_factory=list)


_CONDITION_TYPES = (ast.Compare, ast.Between, ast.In, ast.And, ast.Or, ast.Not, ast.Call)
_OPERAND_TYPES = (ast.PathOperand, ast.ValueOperand, ast.Call)


def _unwrap(node: _Node) -> ast.Condition | ast.Operand:
    return node.inner if isinstance(node, _Group) else node


def _as_condition(node: ast.Condition | ast.Operand) -> ast.Condition | None:
    return node if isinstance(node, _CONDITION_TYPES) else None


class _Parser:
    def __init__(
        self, text: str, keywords: frozenset[str], functions: frozenset[str] | None = None
    ) -> None:
        self.text = text
        # The names that may be called; None: any (a condition reports an unknown name after
        # parsing, an update cannot parse "foo(" at all).
        self.functions = functions
        self.tokens: list[Token] = tokenize(text)
        self.pos = 0
        self.keywords = keywords
        self.findings: list[Deferred] = []
        self.names_used: set[str] = set()
        self.values_used: set[str] = set()
        self.operators = 0

    # Token helpers ----------------------------------------------------------------------------

    def fail(self, index: int | None = None) -> NoReturn:
        at = self.pos if index is None else index
        raise ExpressionSyntaxError(syntax_error_message(self.text, self.tokens, at))

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind == BAD:
            self.fail()
        self.pos += 1
        return token

    def expect(self, kind: str) -> Token:
        if self.tokens[self.pos].kind != kind:
            self.fail()
        return self.advance()

    def keyword(self) -> str | None:
        token = self.tokens[self.pos]
        if token.kind == NAME:
            upper = token.text.upper()
            if upper in self.keywords:
                return upper
        return None

    def note(self, category: str, message: str) -> None:
        self.findings.append(Deferred(category, message))

    def finish(self) -> None:
        if self.tokens[self.pos].kind != EOF:
            self.fail()

    # Paths and operands -----------------------------------------------------------------------

    def path_name(self) -> str:
        token = self.tokens[self.pos]
        if token.kind == ATTR_NAME:
            self.names_used.add(token.text)
        elif token.kind == NAME and token.text.upper() not in self.keywords:
            if token.text.upper() in RESERVED_WORDS:
                self.note(
                    RESERVED,
                    f"Attribute name is a reserved keyword; reserved keyword: {token.text}",
                )
        else:
            self.fail()
        self.pos += 1
        return token.text

    def parse_path(self) -> ast.Path:
        """A document path: at most `NESTING_DEPTH_MAX` elements (the top-level attribute is the
        first level), each list index within a 32-bit signed integer, as DynamoDB allows."""
        elements: list[ast.PathElement] = [self.path_name()]
        while True:
            kind = self.tokens[self.pos].kind
            if kind == ".":
                self.pos += 1
                elements.append(self.path_name())
            elif kind == "[":
                self.pos += 1
                index = self.expect(INTEGER)
                self.expect("]")
                if int(index.text) > limits.DOCUMENT_PATH_LIST_INDEX_MAX:
                    raise ExpressionSyntaxError(
                        f"List index is not within the allowable range; index: [{index.text}]"
                    )
                elements.append(int(index.text))
            else:
                break
        if len(elements) > limits.NESTING_DEPTH_MAX:
            raise ExpressionSyntaxError(
                f"The document path has too many nesting levels; nesting levels: {len(elements)}"
            )
        return tuple(elements)

    def _call_start(self) -> bool:
        """Whether the next tokens open a function call: a name that is not a keyword, then "("."""
        token = self.tokens[self.pos]
        return (
            token.kind == NAME
            and self.tokens[self.pos + 1].kind == "("
            and token.text.upper() not in self.keywords
            and (self.functions is None or token.text in self.functions)
        )

    def _leaf(self) -> ast.Operand:
        token = self.peek()
        if token.kind == ATTR_VALUE:
            self.pos += 1
            self.values_used.add(token.text)
            return ast.ValueOperand(token.text)
        return ast.PathOperand(self.parse_path())

    def _close_groups(self, node: _Node, count: int) -> _Node:
        """Consume the ")" of ``count`` groups opened around ``node``; ``((x))`` is redundant."""
        for _ in range(count):
            self.expect(")")
            if isinstance(node, _Group):
                self.note(PARENS, "The expression has redundant parentheses;")
            node = _Group(_unwrap(node))
        return node

    def parse_atom(self) -> ast.Operand:
        """A path, a value or a function call (whose arguments are operands)."""
        return cast(ast.Operand, self._operand_group(allow_groups=False))

    def parse_operand(self) -> ast.Operand:
        node = self._operand_group()
        inner = _unwrap(node)
        assert isinstance(inner, _OPERAND_TYPES)
        return inner

    def _operand_group(self, *, allow_groups: bool = True) -> _Node:
        """``operand := "(" operand ")" | atom``, with function calls nested in their arguments.

        The nesting is kept on ``calls`` (one entry per call whose arguments are being read,
        with the groups opened before its name), not on Python's stack, so a deep nesting that
        fits DynamoDB's 4 KB is parsed, and then refused or accepted as DynamoDB does.
        """
        token = self.tokens[self.pos]
        if token.kind != "(" and (token.kind != NAME or self.tokens[self.pos + 1].kind != "("):
            return self._leaf()  # the common case: a path or a value, nothing nested
        calls: list[_CallFrame] = []
        while True:
            opened = 0
            if allow_groups or calls:
                while self.tokens[self.pos].kind == "(":
                    self.pos += 1
                    opened += 1
            if self._call_start():
                calls.append(_CallFrame(self.tokens[self.pos].text, opened))
                self.pos += 2
                continue
            node = self._close_groups(self._leaf(), opened)
            while calls:
                frame = calls[-1]
                inner = _unwrap(node)
                assert isinstance(inner, _OPERAND_TYPES)
                frame.args.append(inner)
                if self.tokens[self.pos].kind == ",":
                    self.pos += 1
                    break
                self.expect(")")
                self.operators += 1
                calls.pop()
                node = self._close_groups(ast.Call(frame.name, tuple(frame.args)), frame.opened)
            else:
                return node

    # Conditions -------------------------------------------------------------------------------

    def parse_condition(self) -> ast.Condition:
        node = _unwrap(self._disjunction())
        self.finish()
        condition = _as_condition(node)
        if condition is None:
            self.fail()
        return condition

    def _condition_operand(self, node: _Node, index: int) -> ast.Condition:
        condition = _as_condition(_unwrap(node))
        if condition is None:
            self.fail(index)
        return condition

    def _disjunction(self) -> _Node:
        """``or`` (module doc), with every parenthesised condition and pending NOT, AND and OR on
        ``contexts`` instead of Python's stack: DynamoDB bounds an expression only by its 4 KB and
        300 operators, and 299 nested ``NOT (`` levels must parse like one."""
        contexts = [_Context()]
        while True:
            if self.keyword() == "NOT":
                self.pos += 1
                self.operators += 1
                contexts[-1].nots += 1
                continue
            if self.tokens[self.pos].kind == "(":
                self.pos += 1
                contexts.append(_Context())
                continue
            node: _Node | None = self.parse_atom()
            while node is not None:
                node = self._reduce(contexts[-1], self._comparison(node))
                if node is None:
                    break  # an AND or OR was read: its right operand follows
                if len(contexts) == 1:
                    return node
                contexts.pop()
                node = self._close_groups(node, 1)

    def _reduce(self, context: _Context, node: _Node) -> _Node | None:
        """Apply the NOTs and the pending AND and OR of ``context`` to a finished comparison.

        Returns the context's whole condition, or None after reading an AND or OR whose right
        operand is still to come. NOT binds tighter than AND, and AND than OR; both are
        left-associative.
        """
        while context.nots:
            context.nots -= 1
            node = ast.Not(self._condition_operand(node, self.pos))
        if context.and_left is not None:
            node = ast.And(context.and_left, self._condition_operand(node, self.pos))
            context.and_left = None
        if self.keyword() == "AND":
            context.and_left = self._condition_operand(node, self.pos)
            self.pos += 1
            self.operators += 1
            return None
        if context.or_left is not None:
            node = ast.Or(context.or_left, self._condition_operand(node, self.pos))
            context.or_left = None
        if self.keyword() == "OR":
            context.or_left = self._condition_operand(node, self.pos)
            self.pos += 1
            self.operators += 1
            return None
        return node

    def _comparison(self, node: _Node) -> _Node:
        """``comparison`` after its primary: a comparator, BETWEEN or IN if an operand is first."""
        left = _unwrap(node)
        if not isinstance(left, _OPERAND_TYPES):
            return node
        token = self.peek()
        if token.kind in COMPARATORS:
            self.pos += 1
            self.operators += 1
            return ast.Compare(token.kind, left, self.parse_operand())
        keyword = self.keyword()
        if keyword == "BETWEEN":
            self.pos += 1
            low = self.parse_operand()
            if self.keyword() != "AND":
                self.fail()
            self.pos += 1
            self.operators += 1
            return ast.Between(left, low, self.parse_operand())
        if keyword == "IN":
            self.pos += 1
            self.expect("(")
            choices = [self.parse_operand()]
            while self.peek().kind == ",":
                self.pos += 1
                choices.append(self.parse_operand())
            self.expect(")")
            self.operators += 1
            if len(choices) > limits.EXPRESSION_IN_OPERANDS_MAX:
                self.note(
                    LIMIT,
                    "The IN operator is provided with too many operands; "
                    f"number of operands: {len(choices)}",
                )
            return ast.In(left, tuple(choices))
        return node

    # Updates ----------------------------------------------------------------------------------

    def parse_update(self) -> ast.UpdateExpression:
        clauses: list[ast.UpdateClause] = []
        seen: set[str] = set()
        while True:
            keyword = self.keyword()
            if keyword is None:
                self.fail()
            self.pos += 1
            if keyword in seen:
                self.note(
                    SECTION,
                    f'The "{keyword}" section can only be used once in an update expression;',
                )
            seen.add(keyword)
            actions = [self.parse_action(keyword)]
            while self.peek().kind == ",":
                self.pos += 1
                actions.append(self.parse_action(keyword))
            clauses.append(ast.UpdateClause(keyword, tuple(actions)))
            if self.peek().kind == EOF:
                return ast.UpdateExpression(tuple(clauses))

    def parse_action(self, keyword: str) -> ast.UpdateAction:
        path = self.parse_path()
        if keyword == "SET":
            self.expect("=")
            return ast.SetAction(path, self.parse_set_value())
        if keyword == "REMOVE":
            return ast.RemoveAction(path)
        token = self.expect(ATTR_VALUE)
        self.values_used.add(token.text)
        value = ast.ValueOperand(token.text)
        return ast.AddAction(path, value) if keyword == "ADD" else ast.DeleteAction(path, value)

    def parse_set_value(self) -> ast.Operand:
        """``value := term [("+" | "-") operand]``, ``term := "(" value ")" | atom``, with the
        groups counted rather than recursed into."""
        opened = 0
        while self.tokens[self.pos].kind == "(":
            self.pos += 1
            opened += 1
        value = self.parse_atom()
        while True:
            token = self.peek()
            if token.kind in ("+", "-"):
                if isinstance(value, ast.Arithmetic):
                    self.fail()
                self.pos += 1
                value = ast.Arithmetic(token.kind, value, self.parse_operand())
            if not opened:
                return value
            self.expect(")")
            opened -= 1

    # Projections ------------------------------------------------------------------------------

    def parse_projection(self) -> ast.ProjectionExpression:
        paths = [self.parse_path()]
        while self.peek().kind == ",":
            self.pos += 1
            paths.append(self.parse_path())
        self.finish()
        return ast.ProjectionExpression(tuple(paths))

    def result(
        self, tree: ast.Condition | ast.UpdateExpression | ast.ProjectionExpression
    ) -> Parsed:
        return Parsed(
            tree, tuple(self.findings), frozenset(self.names_used), frozenset(self.values_used)
        )


def parse_condition(text: str) -> Parsed:
    """Parse a ConditionExpression, FilterExpression or KeyConditionExpression."""
    parser = _Parser(text, _CONDITION_KEYWORDS)
    tree = parser.parse_condition()
    if parser.operators > limits.EXPRESSION_OPERATORS_MAX:
        parser.note(
            LIMIT,
            f"The expression contains too many operators; operator count: {parser.operators}",
        )
    return parser.result(tree)


def parse_update(text: str) -> Parsed:
    """Parse an UpdateExpression; a name that is not one of DynamoDB's functions followed by "("
    is a syntax error at the "(", as in DynamoDB."""
    parser = _Parser(text, _UPDATE_KEYWORDS, FUNCTIONS)
    return parser.result(parser.parse_update())


def parse_projection(text: str) -> Parsed:
    parser = _Parser(text, frozenset())
    return parser.result(parser.parse_projection())

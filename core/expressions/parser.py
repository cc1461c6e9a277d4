"""Recursive-descent parsers for condition, update and projection expressions.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

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
        self.depth = 0

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

    def descend(self) -> None:
        """Enter one more level of parentheses, NOT or function call, within the nesting bound."""
        self.depth += 1
        if self.depth > limits.EXPRESSION_NESTING_DEPTH_MAX:
            raise ExpressionSyntaxError(
                "Expression nesting has exceeded the maximum allowed depth; "
                f"maximum depth: {limits.EXPRESSION_NESTING_DEPTH_MAX}"
            )

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

    def parse_atom(self) -> ast.Operand:
        token = self.peek()
        if token.kind == ATTR_VALUE:
            self.pos += 1
            self.values_used.add(token.text)
            return ast.ValueOperand(token.text)
        if (
            token.kind == NAME
            and self.tokens[self.pos + 1].kind == "("
            and token.text.upper() not in self.keywords
            and (self.functions is None or token.text in self.functions)
        ):
            self.pos += 2
            self.descend()
            args = [self.parse_operand()]
            while self.peek().kind == ",":
                self.pos += 1
                args.append(self.parse_operand())
            self.expect(")")
            self.depth -= 1
            self.operators += 1
            return ast.Call(token.text, tuple(args))
        return ast.PathOperand(self.parse_path())

    def parse_operand(self) -> ast.Operand:
        node = self._operand_group()
        inner = _unwrap(node)
        assert isinstance(inner, _OPERAND_TYPES)
        return inner

    def _operand_group(self) -> _Node:
        if self.peek().kind != "(":
            return self.parse_atom()
        self.pos += 1
        self.descend()
        inner = self._operand_group()
        self.expect(")")
        self.depth -= 1
        if isinstance(inner, _Group):
            self.note(PARENS, "The expression has redundant parentheses;")
        return _Group(_unwrap(inner))

    # Conditions -------------------------------------------------------------------------------

    def parse_condition(self) -> ast.Condition:
        node = _unwrap(self.parse_or())
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

    def parse_or(self) -> _Node:
        left = self.parse_and()
        while self.keyword() == "OR":
            first = self._condition_operand(left, self.pos)
            self.pos += 1
            self.operators += 1
            second = self._condition_operand(self.parse_and(), self.pos)
            left = ast.Or(first, second)
        return left

    def parse_and(self) -> _Node:
        left = self.parse_not()
        while self.keyword() == "AND":
            first = self._condition_operand(left, self.pos)
            self.pos += 1
            self.operators += 1
            second = self._condition_operand(self.parse_not(), self.pos)
            left = ast.And(first, second)
        return left

    def parse_not(self) -> _Node:
        if self.keyword() == "NOT":
            self.pos += 1
            self.operators += 1
            self.descend()
            operand = self._condition_operand(self.parse_not(), self.pos)
            self.depth -= 1
            return ast.Not(operand)
        return self.parse_comparison()

    def parse_comparison(self) -> _Node:
        node = self.parse_primary()
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

    def parse_primary(self) -> _Node:
        if self.peek().kind != "(":
            return self.parse_atom()
        self.pos += 1
        self.descend()
        inner = self.parse_or()
        self.expect(")")
        self.depth -= 1
        if isinstance(inner, _Group):
            self.note(PARENS, "The expression has redundant parentheses;")
        return _Group(_unwrap(inner))

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
        left = self._set_term()
        token = self.peek()
        if token.kind in ("+", "-"):
            if isinstance(left, ast.Arithmetic):
                self.fail()
            self.pos += 1
            return ast.Arithmetic(token.kind, left, self.parse_operand())
        return left

    def _set_term(self) -> ast.Operand:
        if self.peek().kind != "(":
            return self.parse_atom()
        self.pos += 1
        self.descend()
        inner = self.parse_set_value()
        self.expect(")")
        self.depth -= 1
        return inner

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

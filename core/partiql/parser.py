"""The PartiQL parser: DynamoDB's four statements (and EXISTS) by recursive descent.

The grammar is the Developer Guide's (PartiQL reference: select, insert, update, delete,
functions and operators):

    statement  := select | insert | update | delete | EXISTS '(' select ')'
    select     := SELECT ('*' | path {',' path}) FROM target [WHERE condition]
                  [ORDER BY path [ASC|DESC] {',' path [ASC|DESC]}]
    insert     := INSERT INTO name VALUE value
    update     := UPDATE name (SET path '=' source {',' ...} | REMOVE path {',' path})+
                  WHERE condition [RETURNING (ALL|MODIFIED) (OLD|NEW) '*']
    delete     := DELETE FROM name WHERE condition [RETURNING ALL OLD '*']
    target     := name ['.' name]
    condition  := term {OR term};  term := factor {AND factor};  factor := NOT factor | predicate
    predicate  := '(' condition ')' | begins_with|contains|attribute_type '(' path ',' operand ')'
                | operand (op operand | [NOT] BETWEEN operand AND operand | [NOT] IN list
                           | IS [NOT] (MISSING | NULL))
    operand    := path | size '(' path ')' | value
    value      := 'string' | number | TRUE | FALSE | NULL | MISSING | '?' | '[' values ']'
                | '{' 'key' ':' value, ... '}' | '<<' values '>>'
    path       := name {'.' name | '[' number ']' | '[' 'string' ']'}
    name       := word | "quoted"

What DynamoDB's PartiQL does not run (joins, several FROM sources, subqueries, GROUP BY, LIMIT,
aggregates, arithmetic in WHERE, inserting several items) is refused with the ValidationException
DynamoDB gives for it. A syntax error is `Statement wasn't well formed, can't be processed: ...`
(DynamoDB's wording) followed by what was expected and the place of the token found, as
`line:column:length`. DynamoDB publishes neither the detail after the colon nor its places for
most faults; the details here are dynalab's own, written in the same form.
"""

from __future__ import annotations

from core import limits
from core.errors import ValidationError
from core.partiql import ast
from core.partiql.tokens import BAD, EOF, NUMBER, PARAMETER, QUOTED, STRING, WORD, Token, tokenize

WELL_FORMED = "Statement wasn't well formed, can't be processed: "
# DynamoDB refuses an aggregate in a projection this way (its text for COUNT, the one it names).
AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX")
_COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")
_CONDITION_FUNCTIONS = ("BEGINS_WITH", "CONTAINS", "ATTRIBUTE_TYPE")
_UPDATE_FUNCTIONS = ("LIST_APPEND", "SET_ADD", "SET_DELETE")
# Words that end a projection list or a path, so never read as an identifier where one of them
# is due: `SELECT * FROM t WHERE ...` must not take WHERE for part of the table's path.
_CLAUSE_WORDS = frozenset({"FROM", "WHERE", "ORDER", "SET", "REMOVE", "RETURNING", "VALUE"})
UNSUPPORTED = "Unsupported operation: "


def syntax_error(detail: str, token: Token) -> ValidationError:
    """The syntax error DynamoDB gives, placed at `token`."""
    found = "end of statement" if token.kind == EOF else f"'{token.text}'"
    return ValidationError(f"{WELL_FORMED}{detail}, found {found} at {token.place}")


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.position = 0
        self.parameters = 0
        self.depth = 0  # NOTs, parentheses and literal containers open around the token

    def enter(self, token: Token) -> None:
        """Go one level deeper at `token`, refusing a statement nested past the bound."""
        self.depth += 1
        if self.depth > limits.PARTIQL_NESTING_DEPTH_MAX:
            # DynamoDB does not publish its words for this; the bound is dynalab's.
            raise ValidationError(
                f"{WELL_FORMED}nested deeper than {limits.PARTIQL_NESTING_DEPTH_MAX} levels, "
                f"at {token.place}"
            )

    # Token helpers ----------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return self.tokens[self.position]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.position + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.token
        if token.kind != EOF:
            self.position += 1
        return token

    def accept(self, kind: str) -> Token | None:
        if self.token.kind == kind:
            return self.advance()
        return None

    def accept_word(self, *keywords: str) -> Token | None:
        if self.token.is_word(*keywords):
            return self.advance()
        return None

    def expect(self, kind: str, what: str) -> Token:
        token = self.accept(kind)
        if token is None:
            raise syntax_error(f"expected {what}", self.token)
        return token

    def expect_word(self, keyword: str) -> Token:
        token = self.accept_word(keyword)
        if token is None:
            raise syntax_error(f"expected {keyword}", self.token)
        return token

    def fail_bad(self) -> None:
        if self.token.kind == BAD:
            raise syntax_error("unexpected character", self.token)

    # Statements -------------------------------------------------------------------------------

    def statement(self) -> ast.Statement:
        self.fail_bad()
        token = self.token
        statement: ast.Statement
        if token.is_word("SELECT"):
            statement = self.select()
        elif token.is_word("INSERT"):
            statement = self.insert()
        elif token.is_word("UPDATE"):
            statement = self.update()
        elif token.is_word("DELETE"):
            statement = self.delete()
        elif token.is_word("EXISTS"):
            self.advance()
            self.expect("(", "'('")
            select = self.select()
            self.expect(")", "')'")
            statement = ast.Exists(select, self.parameters)
        else:
            # DynamoDB's words for a statement that is none of the four.
            raise ValidationError(WELL_FORMED + "Expected data manipulation")
        self.accept(";")
        self.fail_bad()
        if self.token.kind != EOF:
            raise syntax_error("expected the end of the statement", self.token)
        return statement

    def select(self) -> ast.Select:
        self.expect_word("SELECT")
        projection: tuple[ast.Path, ...] | None = None
        if self.accept("*") is None:
            paths = [self.projected_path()]
            while self.accept(","):
                paths.append(self.projected_path())
            projection = tuple(paths)
        self.expect_word("FROM")
        target = self.target()
        if self.token.kind == ",":
            raise ValidationError(
                f"{UNSUPPORTED}a FROM clause may name one table only, at {self.token.place}"
            )
        if self.token.is_word("JOIN", "INNER", "LEFT", "RIGHT", "CROSS", "OUTER"):
            raise ValidationError(f"{UNSUPPORTED}JOIN, at {self.token.place}")
        where = self.condition() if self.accept_word("WHERE") else None
        order_by: list[tuple[ast.Path, bool]] = []
        if self.accept_word("ORDER"):
            self.expect_word("BY")
            while True:
                path = self.path()
                descending = self.accept_word("DESC") is not None
                if not descending:
                    self.accept_word("ASC")
                order_by.append((path, descending))
                if not self.accept(","):
                    break
        for word in ("GROUP", "HAVING", "LIMIT", "OFFSET", "UNION", "INTERSECT", "EXCEPT"):
            if self.token.is_word(word):
                raise ValidationError(f"{UNSUPPORTED}{word}, at {self.token.place}")
        return ast.Select(projection, target, where, tuple(order_by), self.parameters)

    def projected_path(self) -> ast.Path:
        token = self.token
        if token.kind == WORD and token.text.upper() in AGGREGATES and self.peek().kind == "(":
            # DynamoDB's text for an aggregate in a projection (observed for COUNT).
            raise ValidationError(f"Unexpected path component at {token.line}:{token.column}:5")
        if token.kind not in (WORD, QUOTED) or token.is_word(*_CLAUSE_WORDS):
            raise syntax_error("expected an attribute name or '*' to select", token)
        return self.path()

    def target(self) -> ast.Target:
        token = self.token
        table = self.name("a table name")
        index = None
        if self.accept("."):
            index = self.name("an index name")
        if self.token.kind == ".":
            raise syntax_error("expected a table name and at most one index name", self.token)
        return ast.Target(table, index, token)

    def insert(self) -> ast.Insert:
        self.expect_word("INSERT")
        self.expect_word("INTO")
        token = self.token
        target = self.target()
        if target.index is not None:
            raise ValidationError(
                "FROM clause may only contain a single table name in data manipulation "
                f"statements at {token.place}"
            )
        if self.token.is_word("VALUES") or self.token.kind == "<<":
            raise ValidationError(
                f"{UNSUPPORTED}Inserting multiple items in a single statement is not supported, "
                'use "INSERT INTO tableName VALUE item" instead'
            )
        self.expect_word("VALUE")
        item = self.value()
        if self.token.kind == ",":
            raise ValidationError(
                f"{UNSUPPORTED}Inserting multiple items in a single statement is not supported, "
                'use "INSERT INTO tableName VALUE item" instead'
            )
        return ast.Insert(target, item, self.parameters)

    def update(self) -> ast.Update:
        self.expect_word("UPDATE")
        target = self.target()
        actions: list[ast.SetAction | ast.RemoveAction] = []
        while True:
            if self.accept_word("SET"):
                while True:
                    path = self.path()
                    self.expect("=", "'='")
                    actions.append(ast.SetAction(path, self.set_source()))
                    if not self.accept(","):
                        break
            elif self.accept_word("REMOVE"):
                while True:
                    actions.append(ast.RemoveAction(self.path()))
                    if not self.accept(","):
                        break
            else:
                break
        if not actions:
            raise syntax_error("expected SET or REMOVE", self.token)
        self.expect_word("WHERE")
        where = self.condition()
        returning = self.returning()
        return ast.Update(target, tuple(actions), where, returning, self.parameters)

    def delete(self) -> ast.Delete:
        self.expect_word("DELETE")
        self.expect_word("FROM")
        target = self.target()
        self.expect_word("WHERE")
        where = self.condition()
        returning = self.returning()
        if returning is not None and returning != "ALL_OLD":
            words = next(key for key, value in ast.RETURNING.items() if value == returning)
            raise ValidationError(
                f"Invalid returning clause: RETURNING {words[0]} {words[1]} *. Only RETURNING "
                "ALL OLD * is allowed in DELETE statements."
            )
        return ast.Delete(target, where, returning, self.parameters)

    def returning(self) -> str | None:
        if not self.accept_word("RETURNING"):
            return None
        which = self.token
        if not which.is_word("ALL", "MODIFIED"):
            raise syntax_error("expected ALL or MODIFIED", which)
        self.advance()
        image = self.token
        if not image.is_word("OLD", "NEW"):
            raise syntax_error("expected OLD or NEW", image)
        self.advance()
        self.expect("*", "'*'")
        return ast.RETURNING[(which.text.upper(), image.text.upper())]

    def set_source(self) -> ast.SetSource:
        token = self.token
        if (
            token.kind == WORD
            and token.text.upper() in _UPDATE_FUNCTIONS
            and self.peek().kind == "("
        ):
            self.advance()
            self.advance()
            arguments = [self.path_or_value()]
            while self.accept(","):
                arguments.append(self.path_or_value())
            self.expect(")", "')'")
            return ast.Call(token.text.lower(), tuple(arguments), token)
        left = self.path_or_value()
        op = self.accept("+") or self.accept("-")
        if op is None:
            return left
        return ast.Arithmetic(op.text, left, self.path_or_value())

    def path_or_value(self) -> ast.Path | ast.Value:
        if self.token.kind in (WORD, QUOTED) and not self._literal_word(self.token):
            return self.path()
        return self.value()

    # Conditions -------------------------------------------------------------------------------

    def condition(self) -> ast.Condition:
        items = [self.term()]
        while self.accept_word("OR"):
            items.append(self.term())
        return items[0] if len(items) == 1 else ast.Or(tuple(items))

    def term(self) -> ast.Condition:
        items = [self.factor()]
        while self.accept_word("AND"):
            items.append(self.factor())
        return items[0] if len(items) == 1 else ast.And(tuple(items))

    def factor(self) -> ast.Condition:
        token = self.token
        if self.accept_word("NOT"):
            self.enter(token)
            inner = self.factor()
            self.depth -= 1
            return ast.Not(inner)
        return self.predicate()

    def predicate(self) -> ast.Condition:
        self.fail_bad()
        token = self.token
        if self.accept("("):
            self.enter(token)
            inner = self.condition()
            self.expect(")", "')'")
            self.depth -= 1
            return inner
        if token.kind == WORD and self.peek().kind == "(":
            name = token.text.upper()
            if name in _CONDITION_FUNCTIONS:
                self.advance()
                self.advance()
                path = self.path()
                self.expect(",", "','")
                argument = self.operand()
                self.expect(")", "')'")
                return ast.Function(name.lower(), path, argument)
            if name == "EXISTS":
                raise ValidationError(
                    f"{UNSUPPORTED}EXISTS is a statement of its own in a transaction, at "
                    f"{token.place}"
                )
            if name != "SIZE":
                raise syntax_error("expected a condition", token)
        left = self.operand()
        if self.token.kind in _COMPARISONS:
            op = self.advance().text
            right = self.operand()
            if self.token.kind in ("+", "-", "*", "/"):
                raise ValidationError(
                    f"{UNSUPPORTED}arithmetic in a WHERE clause, at {self.token.place}"
                )
            return ast.Comparison("<>" if op == "!=" else op, left, right)
        negated = self.accept_word("NOT") is not None
        if self.accept_word("BETWEEN"):
            low = self.operand()
            self.expect_word("AND")
            high = self.operand()
            between: ast.Condition = ast.Between(left, low, high)
            return ast.Not(between) if negated else between
        if self.accept_word("IN"):
            in_: ast.Condition = ast.In(left, self.in_list())
            return ast.Not(in_) if negated else in_
        if negated:
            raise syntax_error("expected BETWEEN or IN", self.token)
        if self.accept_word("IS"):
            if not isinstance(left, ast.Path):
                raise syntax_error("expected an attribute before IS", token)
            is_negated = self.accept_word("NOT") is not None
            what = self.token
            if not what.is_word("MISSING", "NULL"):
                raise syntax_error("expected MISSING or NULL", what)
            self.advance()
            return ast.Is(left, what.text.upper(), is_negated)
        raise syntax_error("expected a comparison", self.token)

    def in_list(self) -> tuple[ast.Operand, ...]:
        opener = self.token
        if opener.kind not in ("(", "["):
            raise syntax_error("expected '(' or '[' after IN", opener)
        self.advance()
        closer = ")" if opener.kind == "(" else "]"
        values = [self.operand()]
        while self.accept(","):
            values.append(self.operand())
        self.expect(closer, f"'{closer}'")
        return tuple(values)

    def operand(self) -> ast.Operand:
        token = self.token
        if token.is_word("SIZE") and self.peek().kind == "(":
            self.advance()
            self.advance()
            path = self.path()
            self.expect(")", "')'")
            return ast.Size(path)
        if token.kind == "(" or (token.kind == WORD and self.peek().kind == "("):
            if self.peek().is_word("SELECT") or token.is_word("SELECT"):
                raise ValidationError(f"{UNSUPPORTED}subqueries, at {token.place}")
            raise syntax_error("expected an attribute or a value", token)
        return self.path_or_value()

    # Paths and values -------------------------------------------------------------------------

    def name(self, what: str) -> str:
        token = self.token
        if token.kind == QUOTED or (token.kind == WORD and token.text.upper() not in _CLAUSE_WORDS):
            self.advance()
            return token.text
        raise syntax_error(f"expected {what}", token)

    def path(self) -> ast.Path:
        first = self.token
        elements: list[str | int] = [self.name("an attribute name")]
        while True:
            if self.accept("."):
                elements.append(self.name("an attribute name after '.'"))
            elif self.accept("["):
                index = self.token
                if index.kind == NUMBER and index.text.isdigit():
                    elements.append(int(index.text))
                elif index.kind == STRING:
                    elements.append(index.text)
                else:
                    raise syntax_error("expected a list index or a map key", index)
                self.advance()
                self.expect("]", "']'")
            else:
                return ast.Path(tuple(elements), first)

    @staticmethod
    def _literal_word(token: Token) -> bool:
        return token.is_word("TRUE", "FALSE", "NULL", "MISSING")

    def value(self) -> ast.Value:
        self.fail_bad()
        token = self.token
        if token.kind == STRING:
            self.advance()
            return ast.Literal(("S", token.text))
        if token.kind == NUMBER:
            self.advance()
            return ast.Literal(("N", token.text))
        if token.kind in ("-", "+") and self.peek().kind == NUMBER:
            self.advance()
            number = self.advance()
            sign = "-" if token.kind == "-" else ""
            return ast.Literal(("N", sign + number.text))
        if token.kind == PARAMETER:
            self.advance()
            self.parameters += 1
            return ast.Parameter(self.parameters - 1)
        if token.is_word("TRUE", "FALSE"):
            self.advance()
            return ast.Literal(("BOOL", token.text.upper() == "TRUE"))
        if token.is_word("NULL"):
            self.advance()
            return ast.Literal(("NULL", True))
        if token.is_word("MISSING"):
            self.advance()
            return ast.Missing()
        if token.kind in ("[", "<<", "{"):
            self.enter(token)
            value = self.container(token)
            self.depth -= 1
            return value
        if token.kind == "`":
            raise ValidationError(f"{UNSUPPORTED}Ion literals, at {token.place}")
        raise syntax_error("expected a value", token)

    def container(self, token: Token) -> ast.Value:
        """A list, set or map literal, whose opening token is `token`."""
        self.advance()
        if token.kind == "[":
            return ast.ListValue(self.values_until("]"))
        if token.kind == "<<":
            return ast.SetValue(self.values_until(">>"), token)
        entries: list[tuple[str, ast.Value]] = []
        if not self.accept("}"):
            while True:
                key = self.expect(STRING, "a map key in single quotes")
                self.expect(":", "':'")
                entries.append((key.text, self.value()))
                if not self.accept(","):
                    break
            self.expect("}", "'}'")
        return ast.MapValue(tuple(entries))

    def values_until(self, closer: str) -> tuple[ast.Value, ...]:
        if self.accept(closer):
            return ()
        items = [self.value()]
        while self.accept(","):
            items.append(self.value())
        self.expect(closer, f"'{closer}'")
        return tuple(items)


def parse(text: str) -> ast.Statement:
    """The statement `text` holds; raises ValidationError with DynamoDB's message if none."""
    return _Parser(text).statement()

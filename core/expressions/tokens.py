"""The tokenizer shared by every expression parser, and DynamoDB's syntax-error message.

One compiled regular expression splits the text into tokens in a single pass (C speed), keeping each
token's offsets so that a syntax error can quote the text around it exactly as DynamoDB does:
``Syntax error; token: "<token>", near: "<previous token> <token> <next token>"``, with ``<EOF>``
as the token when the text ends too early and the last token as the ``near`` text.

A character that can start no token, and a ``#`` or ``:`` not followed by a name, become ``bad``
tokens instead of failing at once, so the parser reports them with their neighbours like any other
unexpected token.
"""

from __future__ import annotations

import re
from typing import NamedTuple

NAME = "name"  # attribute names, function names and keywords: [A-Za-z_][A-Za-z0-9_]*
ATTR_NAME = "#"  # an ExpressionAttributeNames placeholder, "#" followed by [A-Za-z0-9_]+
ATTR_VALUE = ":"  # an ExpressionAttributeValues placeholder, ":" followed by [A-Za-z0-9_]+
INTEGER = "int"  # a list index inside square brackets
EOF = "eof"
BAD = "bad"

_TOKEN = re.compile(
    r"""
    [ \t\r\n]*
    (?:
        (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<attr_name>\#[A-Za-z0-9_]+)
      | (?P<attr_value>:[A-Za-z0-9_]+)
      | (?P<int>[0-9]+)
      | (?P<op><>|<=|>=|[()\[\],.=<>+\-])
      | (?P<end>\Z)
      | (?P<bad>.)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_GROUP_KINDS = {
    "name": NAME,
    "attr_name": ATTR_NAME,
    "attr_value": ATTR_VALUE,
    "int": INTEGER,
    "end": EOF,
    "bad": BAD,
}


class Token(NamedTuple):
    kind: str  # one of the kind constants above, or the operator text itself ("(", "<=", ...)
    text: str
    start: int
    end: int


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens; the list always ends with one EOF token."""
    tokens: list[Token] = []
    position = 0
    while True:
        match = _TOKEN.match(text, position)
        if match is None:  # pragma: no cover - the pattern's last alternatives match anything
            raise AssertionError("tokenizer pattern failed to match")
        group = match.lastgroup
        assert group is not None
        start, end = match.span(group)
        value = match.group(group)
        kind = value if group == "op" else _GROUP_KINDS[group]
        tokens.append(Token(kind, value, start, end))
        if kind == EOF:
            return tokens
        position = end


def syntax_error_message(text: str, tokens: list[Token], index: int) -> str:
    """DynamoDB's words for an unexpected token at ``tokens[index]``."""
    token = tokens[index]
    if token.kind == EOF:
        near = tokens[index - 1].text if index > 0 else ""
        return f'Syntax error; token: "<EOF>", near: "{near}"'
    start = tokens[index - 1].start if index > 0 else token.start
    following = tokens[index + 1] if index + 1 < len(tokens) else token
    end = following.end if following.kind != EOF else token.end
    return f'Syntax error; token: "{token.text}", near: "{text[start:end]}"'

"""The PartiQL tokenizer: one compiled regular expression, every token with its place.

DynamoDB's PartiQL is SQL-like: keywords and bare identifiers are words (keywords match in any
case, identifiers keep theirs), double quotes make an identifier of any text (`"Music"`, needed
for reserved words and for a table's index), single quotes a string (`'it''s'`, a doubled quote
standing for one), `?` a parameter, `<<` and `>>` the ends of a set. Each token keeps its line,
column and length (all counted from 1, the length in characters as written, quotes included),
which is how DynamoDB places a fault in a statement (`at 1:13:10`).

A character that can start no token becomes a `bad` token rather than failing here, so that the
parser reports it where it stands like any other unexpected token.
"""

from __future__ import annotations

import re
from typing import NamedTuple

WORD = "word"  # keywords and bare identifiers: [A-Za-z_][A-Za-z0-9_$]*
QUOTED = "quoted"  # a double-quoted identifier, its text unescaped
STRING = "string"  # a single-quoted string, its text unescaped
NUMBER = "number"  # 12, 1.5, .5, 1e3: a decimal, as DynamoDB's N keeps it
PARAMETER = "?"
EOF = "eof"
BAD = "bad"

_TOKEN = re.compile(
    r"""
    (?:[ \t\r\n]+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*
    (?:
        (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<quoted>"(?:[^"]|"")*")
      | (?P<string>'(?:[^']|'')*')
      | (?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
      | (?P<op><<|>>|<>|!=|<=|>=|[?()\[\]{},.:*=<>+\-;])
      | (?P<end>\Z)
      | (?P<bad>.)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_GROUP_KINDS = {
    "word": WORD,
    "quoted": QUOTED,
    "string": STRING,
    "number": NUMBER,
    "end": EOF,
    "bad": BAD,
}


class Token(NamedTuple):
    kind: str  # one of the kind constants above, or the operator text itself ("(", "<<", ...)
    text: str  # the token's value: unescaped for quoted kinds, as written otherwise
    line: int
    column: int
    length: int  # characters as written, quotes included

    @property
    def place(self) -> str:
        """Where the token is, as DynamoDB writes it: `line:column:length`."""
        return f"{self.line}:{self.column}:{self.length}"

    def is_word(self, *keywords: str) -> bool:
        """Whether this is a bare word spelling one of `keywords` (upper case), in any case."""
        return self.kind == WORD and self.text.upper() in keywords


def tokenize(text: str) -> list[Token]:
    """Split `text` into tokens; the list always ends with one EOF token.

    A quote left open swallows the rest of the text as one `bad` token.
    """
    tokens: list[Token] = []
    position = 0
    line, line_start = 1, 0
    while True:
        match = _TOKEN.match(text, position)
        assert match is not None, "a bad token or the end matches anywhere"
        group = match.lastgroup
        assert group is not None
        start, end = match.start(group), match.end(group)
        # Lines are counted over the whitespace and comments skipped before the token.
        skipped_newlines = text.count("\n", position, start)
        if skipped_newlines:
            line += skipped_newlines
            line_start = text.rindex("\n", position, start) + 1
        raw = match.group(group)
        column = start - line_start + 1
        kind = _GROUP_KINDS.get(group, raw)
        if kind == BAD and raw in "'\"":
            # An opening quote with no closing one: the rest of the text is one bad token.
            tokens.append(Token(BAD, text[start:], line, column, len(text) - start))
            tokens.append(Token(EOF, "", line, column, 0))
            return tokens
        value = raw
        if kind == QUOTED:
            value = raw[1:-1].replace('""', '"')
        elif kind == STRING:
            value = raw[1:-1].replace("''", "'")
        tokens.append(Token(kind, value, line, column, end - start))
        if kind == EOF:
            return tokens
        newlines = raw.count("\n")
        if newlines:
            line += newlines
            line_start = start + raw.rindex("\n") + 1
        position = end

"""Settings as data: each service's `DYNALAB_*` environment variables, declared once and read once.

A service keeps its settings in one frozen dataclass (`storagenode.settings.NodeSettings`,
`router.settings.RouterSettings`, `gsi_replicator.settings.ReplicatorSettings`). Each field that an
environment variable may set is declared with `setting(...)`: its default (a named limit from
`core.limits`), the variable's name, how its text is parsed and checked, and one line saying what
it is for. The service's `__main__` calls `from_environ(SettingsClass, os.environ, flags)` once
at start and hands the value to the objects it builds; nothing else reads the environment, so a
test or the simulated cluster sets a value by building the dataclass, and `python -m SERVICE
--help` lists every variable from the same declarations (`describe`). A command-line flag, where
a service has one for a setting, is read by the same parser and wins over the variable.

Pure: the environment is passed in as a mapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_VARIABLE = "variable"
_PARSE = "parse"
_HELP = "help"

T = TypeVar("T")
S = TypeVar("S", bound="DataclassInstance")

_OFF = frozenset({"off", "0", "false", "no", "disabled"})
_ON = frozenset({"on", "1", "true", "yes", "enabled"})


class SettingError(ValueError):
    """An environment variable's text is not a value its setting takes."""


def setting(default: T, variable: str, parse: Callable[[str], T], help: str) -> T:
    """A dataclass field set by environment variable `variable` (text read by `parse`, which
    raises ValueError for text it refuses), `default` when the variable is unset or blank."""
    assert variable.startswith("DYNALAB_"), f"{variable} is not a DYNALAB_ variable"
    field: T = dataclasses.field(
        default=default, metadata={_VARIABLE: variable, _PARSE: parse, _HELP: help}
    )
    return field


def from_environ(cls: type[S], environ: Mapping[str, str], flags: Mapping[str, str | None]) -> S:
    """An instance of settings dataclass `cls`: each field's text from `flags` (a command line's
    values by field name; None: not given), else from its environment variable, read by the
    field's parser; the default when neither gives one. Raises SettingError naming the flag or
    variable whose text is refused."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        variable = field.metadata.get(_VARIABLE)
        if variable is None:
            continue
        flag = flags.get(field.name)
        source, given = (flag_name(field.name), flag) if flag is not None else (variable, None)
        raw = given if given is not None else environ.get(variable, "")
        stripped = raw.strip()
        if not stripped:
            continue
        try:
            values[field.name] = field.metadata[_PARSE](stripped)
        except ValueError as error:
            raise SettingError(f"{source} {stripped!r}: {error}") from error
    return cls(**values)


def flag_name(field: str) -> str:
    """The command-line flag of settings field `field`: `--ttl-sweep-seconds`."""
    return "--" + field.replace("_", "-")


def describe(cls: type[DataclassInstance]) -> str:
    """One line per environment variable of settings dataclass `cls`: name, default, purpose."""
    lines = []
    for field in dataclasses.fields(cls):
        if _VARIABLE in field.metadata:
            default = field.default
            shown = ("on" if default else "off") if isinstance(default, bool) else default
            lines.append(
                f"{field.metadata[_VARIABLE]} ({shown or 'unset'}): {field.metadata[_HELP]}"
            )
    return "\n".join(lines)


def variable(cls: type[DataclassInstance], name: str) -> str:
    """The environment variable of field `name` of settings dataclass `cls`."""
    (found,) = (field for field in dataclasses.fields(cls) if field.name == name)
    value: str = found.metadata[_VARIABLE]
    return value


def variables(cls: type[DataclassInstance]) -> frozenset[str]:
    """The environment variables settings dataclass `cls` declares."""
    return frozenset(
        field.metadata[_VARIABLE]
        for field in dataclasses.fields(cls)
        if _VARIABLE in field.metadata
    )


# Parsers ------------------------------------------------------------------------------------------


def switch(text: str) -> bool:
    """on/off (also 1/0, true/false, yes/no), any case."""
    lowered = text.lower()
    if lowered in _ON:
        return True
    if lowered in _OFF:
        return False
    raise ValueError(f"expected on or off, not {text!r}")


def at_least(least: int, unit: str) -> Callable[[str], int]:
    """A whole number of `unit`s, at least `least`."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise ValueError(f"must be at least {least} {unit}, not {value}")
        return value

    return parse


def seconds_within(
    least: float, most: float, *, open_below: bool = False
) -> Callable[[str], float]:
    """A number of seconds in [least, most] ((least, most] when `open_below`)."""

    def parse(text: str) -> float:
        value = float(text)
        below = value <= least if open_below else value < least
        if below or value > most:
            bracket = "(" if open_below else "["
            raise ValueError(f"must be in {bracket}{least}, {most}] seconds, not {value}")
        return value

    return parse

"""The one exception type the CLI turns into a single line and exit code 2."""

from __future__ import annotations


class WmzooError(Exception):
    """A user-facing error: the message names what is wrong and how to fix it."""


class UnknownNameError(WmzooError, KeyError):
    """A backbone, environment, policy or preset name that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(WmzooError, ImportError):
    """An optional dependency is not installed; the message carries the pip command."""


class SpecError(WmzooError, ValueError):
    """Valid-looking spec values that a component cannot be built with (e.g. more CNN stages than
    the frame size allows). A plugin raises it from ``build`` with a message naming the field,
    the value and what would work; the CLI prints it as one line and exits with code 2."""


def split_names(text: str, flag: str, *, unique: bool = False) -> list[str]:
    """A command-line comma list, ``"A, B"`` → ``["A", "B"]``: spaces around names dropped, an
    empty entry (``A,,B``, a trailing comma) refused, and with ``unique`` a name given twice."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise WmzooError(f"{flag} {text!r}: an empty entry; give names separated by commas, e.g. A,B")
    if unique and len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise WmzooError(f"{flag} {text!r}: {twice} is given twice; give each name once")
    return names

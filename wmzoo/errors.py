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

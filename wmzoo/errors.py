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

"""Exceptions raised by posenc. Every message names the offending parameter and value."""

from __future__ import annotations


class PosencError(Exception):
    """Base class of every error posenc raises on purpose."""


class ParameterError(PosencError, ValueError):
    """A parameter or input array has an invalid value, shape or dtype."""


class PositionOutOfRangeError(ParameterError, IndexError):
    """A position lies outside the range an encoding can represent."""


class MixedArrayLibrariesError(PosencError, TypeError):
    """Array arguments come from more than one array library."""


class Unsupported(PosencError, NotImplementedError):
    """An implementation does not cover these arguments (out of its declared scope).

    Raise it (or a plain ``NotImplementedError``) from an adapter or override for a parameter
    value, dtype or shape the implementation does not handle; the conformance harness reports
    the check as ``unsupported`` with this message as the reason, not as an error.
    """


class SpecError(PosencError):
    """A spec file is missing, malformed or violates spec/schema.json."""


class GoldenError(PosencError):
    """A golden file is missing, corrupt, stale or does not match its manifest."""


class BackendError(PosencError):
    """A backend cannot be found, imported or used."""


class MissingFrameworkError(BackendError, ImportError):
    """An optional framework is not installed."""

    def __init__(self, framework: str, extra: str) -> None:
        super().__init__(
            f"posenc's {extra!r} backend needs {framework}, which is not installed: "
            f"pip install 'posenc[{extra}]'"
        )
        self.framework = framework
        self.extra = extra


class MissingExtraError(PosencError, ImportError):
    """A feature needs an optional package that is not installed."""

    def __init__(self, feature: str, package: str, extra: str) -> None:
        super().__init__(f"{feature} needs {package}, which is not installed: "
                         f"pip install 'posenc[{extra}]'")
        self.package = package
        self.extra = extra

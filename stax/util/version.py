"""The installed distribution's version, as ``stax.__version__`` and `stax --version` give it."""
from __future__ import annotations


def installed_version() -> str:
    """Read on each call (callers keep it): importing package metadata slows the start of a new process."""
    from importlib.metadata import PackageNotFoundError, version  # lazily, for the reason above
    try:
        return version("stax")
    except PackageNotFoundError:  # imported from a checkout that was never installed
        return "0+unknown"

"""The exceptions nablac raises: every one is a :class:`nablac.Error`."""


class Error(Exception):
    """Base class of every error nablac raises (the messages are the command line's)."""


class TapeError(Error, ValueError):
    """A tape that breaks a rule of the tape format (the message names the rule and the place)."""


class RecordError(Error):
    """A mistake made while recording a tape (a bad name, a non-finite constant, ...)."""


class BranchError(RecordError, TypeError):
    """Python control flow (``if``, ``while``, ``and``, ``or``, ``bool()``) on a recorded value.

    A tape is straight-line: a branch taken while recording would be frozen for every path.
    Record both sides and choose with ``np.where(cond, a, b)``.
    """


class UnsupportedError(RecordError, TypeError):
    """A numpy function or operation that has no tape operation."""


class CompileError(Error):
    """A compile request the driver refuses (options named as keywords), or a failed compile."""


class OptionError(Error, ValueError):
    """An argument out of its range, of the wrong kind, or unknown."""


class RunError(Error):
    """A kernel that cannot be loaded or run (a missing GPU driver, a bad manifest, ...)."""


class FileError(Error, OSError):
    """A file that cannot be read or written."""


class NonFiniteWarning(RuntimeWarning):
    """Some paths gave a non-finite value or Greek; they are left out of that output's sums."""


__all__ = [
    "Error",
    "TapeError",
    "RecordError",
    "BranchError",
    "UnsupportedError",
    "CompileError",
    "OptionError",
    "RunError",
    "FileError",
    "NonFiniteWarning",
]

"""What every command line shares: one exit-status scheme and a strict argument parser.

Used by the `tfrecord-beam` CLI, `tfrecord2idx` and every job in `pipelines/`. It imports only
the standard library, so `--help` answers before numpy, Beam or torch are loaded. The parser
takes no abbreviations (`--num_shard` is an unknown flag, not `--num_shards`), refuses a
single-valued flag given twice (instead of keeping the last), and a usage error is one line
plus a pointer to --help, exit 2.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Iterable, List, NoReturn, Optional, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1  # the command could not do its work: one line on stderr says why
EXIT_USAGE = 2  # bad arguments: one line on stderr, nothing read or written
EXIT_BAD_DATA = 3  # the command ran to the end and reports bad data (corrupt records, failed checks)
EXIT_INTERRUPTED = 130  # SIGINT

EXIT_HELP = (
    "exit status: 0 ok, 1 failure (one line on stderr), 2 usage error, 3 bad data found and reported, 130 interrupted"
)


def plural(count: int, noun: str) -> str:
    """`1 file`, `2 files`, `1,234 records`: every job's and tool's counts in one format
    (thousands separated by commas, the noun agreeing with the number)."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def positive_int(text: str) -> int:
    """argparse type for counts and sizes: a whole number >= 1 (0 shards, -5 bytes per range:
    a usage error naming the flag, before anything is read or written)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _int_at_least(text, 0)


def timeout_seconds(text: str) -> float:
    """argparse type of every `--timeout` (the CLI's and the jobs'): seconds > 0, as
    `_bounded.parse_timeout` reads them (a usage error naming the flag otherwise)."""
    from ._bounded import parse_timeout

    try:
        return parse_timeout(text, "--timeout")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
    return value


class UsageError(Exception):
    """Bad arguments found after parsing (exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse without abbreviations, without silently repeated flags, with one-line errors."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        self._argv = argv
        repeated = repeated_flags(self, argv)
        if repeated:
            self.error(f"{repeated[0]} given more than once (it takes one value)")
        return super().parse_known_args(argv, namespace)

    def error(self, message: str) -> NoReturn:
        notes = self._misspelled() + self._dashed_files()
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{notes} (see {self.prog} --help)\n")

    def _dashed_files(self) -> str:
        """A note naming a file whose name starts with '-' (`-x.tfrecord`): argparse reads it
        as a flag, so the error would speak of a missing argument instead."""
        own = {s for a in self._actions for s in a.option_strings}
        for arg in getattr(self, "_argv", []):
            if arg.startswith("-") and arg not in own and os.path.exists(arg):
                return f"; {arg} is read as a flag: name the file as ./{arg} or after --"
        return ""

    def _misspelled(self) -> str:
        """A note naming a typed flag that is close to one of ours (`--num_shard`): argparse
        reports the flag it misses first, which would hide the typo."""
        own = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        for arg in getattr(self, "_argv", []):
            name = arg.split("=", 1)[0]
            if name.startswith("--") and name not in own:
                near = difflib.get_close_matches(name, own, n=1, cutoff=0.8)
                if near:
                    return f"; {name} is not {near[0]} (no abbreviations)"
        return ""


class _Version(argparse.Action):
    """--version, computed when asked (describing the engine loads it)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from ._engine_info import describe

        print(describe())
        parser.exit()


def add_version(parser: argparse.ArgumentParser) -> None:
    """--version: the package version and the engine in use."""
    parser.add_argument("--version", action=_Version, help="print the version and the engine in use, then exit")


def usage_error(prog: str, message: str) -> str:
    """The one line a usage error prints."""
    return f"{prog}: error: {message} (see {prog} --help)"


def _value_flags(parser: argparse.ArgumentParser) -> List[str]:
    """Option strings of the parser's actions that store one value (not append, not a switch)."""
    flags: List[str] = []
    for action in parser._actions:  # argparse keeps no public list of actions
        if type(action).__name__ == "_StoreAction" and action.option_strings:
            flags.extend(action.option_strings)
    return flags


def _flag_name(arg: str) -> Optional[str]:
    """The option an argument names (`--x=1` -> `--x`, `-n5` -> `-n`), None for a value."""
    if arg.startswith("--"):
        return arg.split("=", 1)[0]
    if arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit():
        return arg[:2]
    return None


def repeated_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> List[str]:
    """The single-valued flags of `parser` that `argv` gives more than once."""
    flags = set(_value_flags(parser))
    seen: dict = {}
    for arg in argv:
        if arg == "--":
            break
        name = _flag_name(arg)
        if name in flags:
            seen[name] = seen.get(name, 0) + 1
    return [name for name, count in seen.items() if count > 1]


def unknown_arguments_message(unknown: Sequence[str], known_flags: Iterable[str], what: str) -> str:
    """A usage error naming the arguments nothing consumed: flags nobody knows (with the
    nearest known flag) and stray words (with the advice to quote a glob)."""
    flags = [a for a in unknown if a.startswith("-")]
    words = [a for a in unknown if not a.startswith("-")]
    known = sorted(set(known_flags))
    parts = []
    for flag in flags:
        name = flag.split("=", 1)[0]
        near = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        parts.append(f"unknown flag {name}{hint} ({what}; flags are spelled out in full)")
    if words:
        shown = " ".join(words[:3]) + (f" ... ({len(words)} in all)" if len(words) > 3 else "")
        parts.append(
            f"stray argument(s) {shown}: no flag takes them (an unquoted glob the shell expanded? "
            "quote it, e.g. --input 'data/*.tfrecord')"
        )
    return "; ".join(parts)


def fail_usage(prog: str, message: str) -> NoReturn:
    """Print the one-line usage error and exit 2."""
    sys.stderr.write(usage_error(prog, message) + "\n")
    raise SystemExit(EXIT_USAGE)

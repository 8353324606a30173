"""tfrecord2idx: write `.tfindex` files, as the `tfrecord` package's tool, for compressed files too.

    tfrecord2idx data.tfrecord data.tfindex      one file, index path given
    tfrecord2idx data/                           every *.tfrecord* in a directory
    tfrecord2idx 'gs://bucket/train-*.tfrecord'  a glob; indexes beside each file
    tfrecord2idx --verify data/                  also check every payload CRC
    tfrecord2idx a.tfrecord b.tfrecord c.tfrecord  several files (3 or more): each indexed beside itself

Two paths mean DATA INDEX, as in the `tfrecord` package; an INDEX that exists and is not an
index file (an unquoted glob that matched two data files) is refused, so no data file is ever
overwritten. A path that exists is taken literally, even with [ ] * ? in its name. A pipe,
FIFO or /dev/stdin is refused in one line without being opened (an index records offsets in a
file, which a stream has not); inside a directory such files are left out.

exit status: 0 ok, 1 failure (one line on stderr), 2 usage error, 3 bad data found and reported
(a corrupt or truncated file: no index written for it), 130 interrupted
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, List, Optional

from .. import _usage
from .. import compression as _compression


def create_index(
    tfrecord_file: str, index_file: Optional[str] = None, verify: bool = False, compression: Optional[str] = "auto"
) -> int:
    """Write the index of one file (beside it by default); returns its record count.

    The `tfrecord` package's name for `tfrecord_beam.index.create_index`; a corrupt file raises
    before anything is written, so no partial index is left.
    """
    from .. import index as _index

    return len(_index.create_index(tfrecord_file, index_file, compression, verify))


def create_indices(
    tfrecord_dir: str,
    verify: bool = False,
    progress: Optional[Callable[[str], None]] = None,
    compression: Optional[str] = "auto",
) -> int:
    """Index every `*.tfrecord*` file (compressed too) of a directory or glob; returns files indexed."""
    from .. import fs

    files = fs.data_files(tfrecord_dir)
    for number, path in enumerate(files, start=1):
        count = create_index(path, verify=verify, compression=compression)
        if progress:
            progress(f"[{number}/{len(files)}] {path}: {count} records")
    return len(files)


def _parser() -> argparse.ArgumentParser:
    parser = _usage.ArgumentParser(
        prog="tfrecord2idx",
        description="Write .tfindex files (one 'offset length' line per record).",
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="DATA [INDEX]: a TFRecord file, a directory or a glob, and optionally the index "
        "path of a single file; or three or more data files",
    )
    parser.add_argument("--verify", action="store_true", help="check every payload CRC too")
    _compression.add_argument(parser, "--compression", default="auto", auto=True, what="the files' codec")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point; returns the exit status (see the module doc). Arguments are parsed
    before the package's readers load, so --help answers at once."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("tfrecord2idx: interrupted", file=sys.stderr)
        return _usage.EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    from .. import fs
    from .. import index as _index
    from ..errors import TFRecordError

    started = time.monotonic()
    index_path = None
    try:
        for path in args.paths:
            fs.refuse_special(path)  # stdin, a pipe, a FIFO: refused unopened, no empty index
        if len(args.paths) == 2:
            target, index_path = args.paths
            try:
                _index.check_index_target(index_path, target)
            except TFRecordError as exc:
                print(_usage.usage_error("tfrecord2idx", f"{exc} (nothing written)"), file=sys.stderr)
                return _usage.EXIT_USAGE
            files = [target]
        elif len(args.paths) > 2:
            files = list(args.paths)
        else:
            target = args.paths[0]
            single = not os.path.isdir(target) and not fs.is_pattern(target)
            files = [target] if single else fs.data_files(target)
    except fs.SpecialFileError as exc:
        print(_usage.usage_error("tfrecord2idx", str(exc)), file=sys.stderr)
        return _usage.EXIT_USAGE
    if not files:
        print(f"tfrecord2idx: no TFRecord files match {args.paths[0]}", file=sys.stderr)
        return _usage.EXIT_FAILURE
    failures: List[BaseException] = []
    records = 0
    for number, path in enumerate(files, start=1):
        try:
            count = create_index(path, index_path, args.verify, args.compression)
        except (TFRecordError, OSError, ValueError) as exc:
            failures.append(exc)
            print(f"tfrecord2idx: {exc} (no index written)", file=sys.stderr)
            continue
        records += count
        if len(files) > 1:
            print(f"[{number}/{len(files)}] {path}: {count} records", file=sys.stderr)
    seconds = time.monotonic() - started
    print(
        f"tfrecord2idx: {len(files) - len(failures)} of {len(files)} files indexed, {records} records, {seconds:.2f} s",
        file=sys.stderr,
    )
    if not failures:
        return _usage.EXIT_OK
    unreadable = any(isinstance(e, OSError) and not isinstance(e, TFRecordError) for e in failures)
    return _usage.EXIT_FAILURE if unreadable else _usage.EXIT_BAD_DATA


if __name__ == "__main__":
    sys.exit(main())


def console_main() -> None:
    """The `tfrecord2idx` console script."""
    sys.exit(main())

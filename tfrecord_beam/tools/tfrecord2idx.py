"""tfrecord2idx: write `.tfindex` files, as the `tfrecord` package's tool, for compressed files too.

    tfrecord2idx data.tfrecord data.tfindex      one file, index path given
    tfrecord2idx data/                           every *.tfrecord* in a directory
    tfrecord2idx 'gs://bucket/train-*.tfrecord'  a glob; indexes beside each file
    tfrecord2idx --verify data/                  also check every payload CRC
    tfrecord2idx a.tfrecord b.tfrecord c.tfrecord  several files (3 or more): each indexed beside itself

Two paths mean DATA INDEX, as in the `tfrecord` package; an INDEX that exists and is not an
index file (an unquoted glob that matched two data files) is refused, so no data file is ever
overwritten.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, List, Optional

from .. import fs
from .. import index as _index
from ..errors import TFRecordError


def create_index(
    tfrecord_file: str, index_file: Optional[str] = None, verify: bool = False, compression: Optional[str] = "auto"
) -> int:
    """Write the index of one file (beside it by default); returns its record count.

    The `tfrecord` package's name for `tfrecord_beam.index.create_index`; a corrupt file raises
    before anything is written, so no partial index is left.
    """
    return len(_index.create_index(tfrecord_file, index_file, compression, verify))


def create_indices(
    tfrecord_dir: str,
    verify: bool = False,
    progress: Optional[Callable[[str], None]] = None,
    compression: Optional[str] = "auto",
) -> int:
    """Index every `*.tfrecord*` file (compressed too) of a directory or glob; returns files indexed."""
    files = fs.data_files(tfrecord_dir)
    for number, path in enumerate(files, start=1):
        count = create_index(path, verify=verify, compression=compression)
        if progress:
            progress(f"[{number}/{len(files)}] {path}: {count} records")
    return len(files)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord2idx",
        description="Write .tfindex files (one 'offset length' line per record).",
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="DATA [INDEX]: a TFRecord file, a directory or a glob, and optionally the index "
        "path of a single file; or three or more data files",
    )
    parser.add_argument("--verify", action="store_true", help="check every payload CRC too")
    parser.add_argument("--compression", default="auto", help="none, gzip, zlib or auto (default)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point; returns the exit status (1 on any corrupt or unreadable file)."""
    args = _parser().parse_args(argv)
    started = time.monotonic()
    index_path = None
    if len(args.paths) == 2:
        target, index_path = args.paths
        try:
            _index.check_index_target(index_path, target)
        except TFRecordError as exc:
            print(f"tfrecord2idx: {exc} (nothing written)", file=sys.stderr)
            return 2
        files = [target]
    elif len(args.paths) > 2:
        files = list(args.paths)
    else:
        target = args.paths[0]
        single = not os.path.isdir(target) and not fs.is_glob(target)
        files = [target] if single else fs.data_files(target)
    if not files:
        print(f"tfrecord2idx: no TFRecord files match {args.paths[0]}", file=sys.stderr)
        return 1
    failures = records = 0
    for number, path in enumerate(files, start=1):
        try:
            count = create_index(path, index_path, args.verify, args.compression)
        except (TFRecordError, OSError, ValueError) as exc:
            failures += 1
            print(f"tfrecord2idx: {exc} (no index written)", file=sys.stderr)
            continue
        records += count
        if len(files) > 1:
            print(f"[{number}/{len(files)}] {path}: {count} records", file=sys.stderr)
    seconds = time.monotonic() - started
    print(
        f"tfrecord2idx: {len(files) - failures} of {len(files)} files indexed, {records} records, {seconds:.2f} s",
        file=sys.stderr,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())


def console_main() -> None:
    """The `tfrecord2idx` console script."""
    sys.exit(main())

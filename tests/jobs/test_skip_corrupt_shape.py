"""`skip_corrupt` has one shape, a bool, from the job's flag (or a dataset's / transform's
argument) down to `SkippingReader` (issue 25, item 4): whether to step over corrupt records
is never read off the presence of a dead-letter writer, a report callback or a list."""

from __future__ import annotations

import re

import pytest
from helpers.fixtures import REPO

pytest.importorskip("apache_beam")

from tfrecord_beam.beam import stages  # noqa: E402
from tfrecord_beam.beam.commit import DeadLetters  # noqa: E402

# the shapes it took before: skip_corrupt=on_corrupt is not None, skip = dead_letters is not None, ...
DERIVED = re.compile(
    r"skip(_corrupt)?\s*=\s*[\w.]+ is not None|dead_letters is not None|"
    r"\[\] if self\.skip_corrupt else None|^\s*if corrupt is None:\s*$"
)


def test_a_stage_lists_skipped_records_only_with_skip_corrupt(tmp_path):
    letters = DeadLetters(str(tmp_path))
    assert stages.dead_letters_for(True, letters) is letters
    assert stages.dead_letters_for(False, letters) is None  # nothing is skipped, nothing listed
    assert stages.dead_letters_for(False, None) is None
    with pytest.raises(ValueError, match="skip_corrupt=True needs dead_letters"):
        stages.dead_letters_for(True, None)  # skipped records must go somewhere


def test_no_module_reads_skip_corrupt_off_another_object():
    found = []
    for root in ("tfrecord_beam", "pipelines"):
        for path in sorted((REPO / root).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if DERIVED.search(line.split("#")[0]):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "skip_corrupt is a bool passed down, not derived:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "        skip_corrupt=on_corrupt is not None,",
        "    skip = dead_letters is not None",
        "        corrupt: Optional[list] = [] if self.skip_corrupt else None",
        "        if corrupt is None:",
    ],
)
def test_the_check_sees_the_old_shapes(line):
    assert DERIVED.search(line)

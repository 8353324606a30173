"""bench/remote.py's bookkeeping (issue 24, item 6): its RESULTS.md section and the issue's
ratios. The measuring itself runs as `make bench-remote` (minutes, a shared machine)."""

from __future__ import annotations

import sys

from helpers.fixtures import REPO

sys.path.insert(0, str(REPO))  # bench/ is not installed: it runs from the checkout
from bench import remote  # noqa: E402


def _row(source, reader, e1, e2, workers=2, data="110k"):
    return {"data": data, "workers": workers, "source": source, "reader": reader, "e1": e1, "e2": e2}


def test_ratios_are_the_issues_targets():
    rows = [
        _row("local", "ours", 10.0, 10.0),
        _row("link", "ours", 20.0, 12.5),
        _row("link", "mosaic", 40.0, 5.0),
        _row("link", "ours", 5.0, 5.0, workers=0),  # no local row at 0 workers: no % of local
    ]
    lines = remote._ratios(rows)
    assert lines == [
        "- 110k, 0 workers, through the link: .",
        "- 110k, 2 workers, through the link: epoch 1 50% of local disk (target 80%); "
        "epoch 2 80% (target 95%); epoch 1 2.00x the peer's, epoch 2 0.40x.",
    ]


def test_results_section_is_appended_then_replaced(tmp_path, monkeypatch):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n## Earlier\n\nkept\n")
    monkeypatch.setattr(remote, "RESULTS", results)
    remote.write_results("first table\n")
    remote.write_results("second table\n")
    text = results.read_text()
    assert text.count(remote.SECTION) == 1
    assert "second table" in text and "first table" not in text
    assert text.startswith("# Results\n\n## Earlier\n\nkept\n")

    results.write_text(text + "\n## Later\n\nalso kept\n")
    remote.write_results("third table\n")
    text = results.read_text()
    assert "third table" in text and "second table" not in text and text.endswith("## Later\n\nalso kept\n")


def test_cache_column_follows_the_datasets_signature():
    import inspect

    from tfrecord_beam.torch import TFRecordDataset

    assert remote.cache_supported() == ("cache_dir" in inspect.signature(TFRecordDataset.__init__).parameters)

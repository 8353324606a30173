"""bench/remote.py's bookkeeping (issue 24, item 6): its RESULTS.md section and the issue's
ratios. The measuring itself runs as `make bench-remote` (minutes, a shared machine)."""

from __future__ import annotations

import sys

import pytest
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


def _args(**given):
    import argparse

    base = dict(data=["110k", "d1"], workers=[2, 0], sources=list(remote.SOURCES), repeats=1, memory_size_mb=None)
    base.update(given)
    return argparse.Namespace(**base, batch=64)


def test_one_command_plans_all_24_cases_and_the_memory_cases():
    cases, memory = remote.plan(_args(), 2000, peer=True)
    assert len(cases) == len(set(cases)) == 24
    assert {c[3] for c in cases} == {"ours", "mosaic"} and {c[2] for c in cases} == {"local", "loopback", "link"}
    assert memory == [(k, w, s) for k, w, s, r in cases if r == "ours"]  # tfrecord_beam's 12, in order
    assert remote.memory_size(_args(), 2000) == 250 and remote.memory_size(_args(), 64) == 16
    assert remote.plan(_args(memory_size_mb=0), 2000, peer=False) == ([c for c in cases if c[3] == "ours"], [])
    assert remote.case_estimate("mosaic", 2000) > remote.case_estimate("ours", 2000) > remote.CASE_OVERHEAD_S


def test_a_failed_case_is_a_row_of_the_report_and_memory_is_shown_at_two_sizes():
    def row(source, reader, rss, error=None, **extra):
        out = {"data": "d1", "workers": 2, "source": source, "reader": reader, "records": 100, "bytes": 10**6}
        out.update(e1=1.0, e2=0.5, rss=rss * 2**20, req1=None, req2=None, runs=1, load=1.0, **extra)
        if error:
            out["error"] = error
        return out

    rows = [row("local", "ours", 600), row("link", "ours", 0, error="boom: it broke"), row("link", "mosaic", 900)]
    memory = [row("local", "ours", 590, size_mb=250), row("link", "ours", 610, size_mb=250)]
    text = remote.report(rows, _args(), 2000, "proxy", (1.0,), (1.0,), final=False, memory=memory)
    assert "| d1 | 2 | link | tfrecord_beam | failed (see below) |" in text
    assert "- d1 w=2 link ours failed: boom: it broke" in text
    assert "Peak RSS of tfrecord_beam at two sizes (250 and 2,000 MB" in text
    assert "| d1 | 2 | local | 590 | 600 | +10 |" in text
    assert "| d1 | 2 | link | 610 | - | - |" in text  # its full-size case failed


def test_without_the_peer_no_mds_is_written_and_streaming_is_not_needed(tmp_path, monkeypatch):
    """`--no-peer` (or no mosaicml-streaming installed) writes the TFRecord shards only; a later
    run with the peer writes both again rather than trusting shards without their MDS copy."""
    monkeypatch.setitem(sys.modules, "streaming", None)  # `import streaming` raises, as when not installed
    tfr, mds, n, size = remote.make_data(tmp_path, "d1", 1, with_peer=False)
    bucket = tmp_path / "buckets" / remote.BUCKET
    shards = sorted((bucket / tfr).glob("*.tfrecord"))
    assert len(shards) == remote.SHARDS and sum(p.stat().st_size for p in shards) == size > 0
    assert not (bucket / mds).exists()
    with pytest.raises(ImportError):  # the peer's run must write MDS: it needs streaming, not the old shards
        remote.make_data(tmp_path, "d1", 1, with_peer=True)

"""bench/remote.py's bookkeeping (issues 24 and 35): its RESULTS.md section, its plan and the
issue's ratios. The measuring itself runs as `make bench-remote` (minutes, a shared machine)."""

from __future__ import annotations

import sys

import pytest
from helpers.fixtures import REPO

sys.path.insert(0, str(REPO))  # bench/ is not installed: it runs from the checkout
from bench import remote  # noqa: E402


def _full(source, reader, e1, e2, workers=2, data="110k", cpu=(1.0, 1.0), records=1000, size=10**8, **extra):
    out = {"data": data, "workers": workers, "source": source, "reader": reader, "records": records, "bytes": size}
    out.update(e1=e1, e2=e2, cpu1=cpu[0], cpu2=cpu[1], rss=2**30, req1=None, req2=None, runs=3, load=1.0)
    out.update(loads=[1.0, 1.5, 2.0], **extra)
    return out


def test_ratios_are_the_issues_targets_against_local_or_the_link():
    """Each tfrecord_beam row is compared with the local baseline of its shape (same data and
    workers): epoch 1 against the lower of local speed and the link's payload capacity, CPU
    seconds and epoch 2 against local's."""
    rows = [
        _full("local", "ours", 1.0, 0.5, cpu=(1.0, 0.5)),  # 1,000 records/s, 100 MB/s: under the link's 125
        _full("link", "ours", 2.0, 0.5, cpu=(1.2, 0.5)),
        _full("local", "ours", 0.5, 0.5, data="d1"),  # 200 MB/s: the link's 125 MB/s is the bound
        _full("link", "ours", 1.0, 0.5, data="d1"),
    ]
    text = remote.report(rows, _args(), 200, "proxy", (1.0,), (1.0,), final=False)
    assert "| 110k | 2 | local | tfrecord_beam | 1,000 | baseline |" in text
    assert "| 110k | 2 | link | tfrecord_beam | 500 | 0.50 | 1.20 | 1.20 | 2,000 | 1.00 | 0.50 | 1.00 |" in text
    assert "| d1 | 2 | link | tfrecord_beam | 1,000 | 0.80 |" in text
    assert remote._bound(rows[3], rows[2]["e1"]) == (1250.0, "link")
    assert remote._bound(rows[1], rows[0]["e1"]) == (1000.0, "local")


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

    base = dict(data=["110k", "d1"], workers=[2, 0], sources=list(remote.SOURCES), repeats=3, peer_repeats=1)
    base.update(rss_size_mb=1000)
    base.update(given)
    return argparse.Namespace(**base, batch=64)


def test_one_command_plans_the_whole_table_and_the_memory_cases():
    cases, memory = remote.plan(_args(), 200, peer=True)
    assert len(cases) == len(set(cases)) == 26  # 24, and the plain loop for each dataset
    assert {c[3] for c in cases} == {"ours", "mosaic", "plain"} and {c[2] for c in cases} == {
        "local",
        "loopback",
        "link",
    }
    assert [c for c in cases if c[3] == "plain"] == [("110k", 0, "local", "plain"), ("d1", 0, "local", "plain")]
    assert memory == [("110k", 2, "loopback"), ("110k", 0, "loopback")]
    assert remote.plan(_args(rss_size_mb=0), 200, peer=False)[1] == []
    assert {c[3] for c in remote.plan(_args(), 200, peer=False)[0]} == {"ours", "plain"}
    assert remote.case_estimate("mosaic", 200) > remote.case_estimate("ours", 200) > remote.CASE_OVERHEAD_S


def test_a_failed_case_is_a_row_of_the_report_and_memory_is_shown_at_two_sizes():
    def row(source, reader, rss, error=None, **extra):
        out = _full(source, reader, 1.0, 0.5, data="d1", records=100, size=10**6, **extra)
        out["rss"] = rss * 2**20
        if error:
            out["error"] = error
        return out

    rows = [row("local", "ours", 600), row("link", "ours", 0, error="boom: it broke"), row("link", "mosaic", 900)]
    memory = [
        row("loopback", "ours", 610, size_mb=1000, small=row("loopback", "ours", 600)),
        row("link", "ours", 610, size_mb=1000),
    ]
    text = remote.report(rows, _args(), 200, "proxy", (1.0,), (1.0,), final=False, memory=memory)
    assert "| d1 | 2 | link | tfrecord_beam | failed (see below) |" in text
    assert "- d1 w=2 link ours failed: boom: it broke" in text
    assert "Peak RSS of tfrecord_beam at two sizes (200 and 1,000 MB" in text
    assert "| d1 | 2 | loopback | 600 | 610 | +10 |" in text
    assert "| d1 | 2 | link | - | 610 | - |" in text  # no main-size row to compare with


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

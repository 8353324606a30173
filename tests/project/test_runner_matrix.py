"""tests/helpers/runner_matrix.py's own logic (the matrix itself is tests/runners, `make test-runners`)."""

from __future__ import annotations

from helpers import runner_matrix as rm


def test_a_runner_is_compared_with_the_fnapi_runner_never_with_itself():
    """With TFRB_RUNNERS=prism (or `-k prism`) the fnapi column does not run first: the
    reference must then come from running the job on the FnApiRunner, not from Prism's output."""
    refs = rm.References()
    prism = rm.Runner("prism", ["--runner=PrismRunner"], "python")
    assert refs.get("mix", prism, own=["prism's"], on_fnapi=lambda: ["fnapi's"]) == ["fnapi's"]
    assert refs.get("mix", rm.load_runner(rm.FNAPI), own=["fnapi's"], on_fnapi=lambda: ["again"]) == ["fnapi's"]


def test_the_fnapi_column_is_its_own_reference_and_runs_nothing_more():
    refs = rm.References()

    def must_not_run():
        raise AssertionError("the fnapi column ran the job twice")

    assert refs.get("reshard", rm.load_runner(rm.FNAPI), own=[b"a"], on_fnapi=must_not_run) == [b"a"]
    assert refs.get("reshard", rm.Runner("flink", [], "python"), own=[b"b"], on_fnapi=must_not_run) == [b"a"]

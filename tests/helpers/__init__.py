"""Helpers shared by the test files (imported as `helpers.NAME`: pytest puts tests/ on sys.path).

    fixtures    where things are: REPO, FIXTURES (the golden files) and their MANIFEST, DATA
    parity      both engines, deep comparison of results, bit-exact floats
    wire        a tiny protobuf wire writer (the many valid encodings upb accepts)
    crafted     crafted damage for the resync and split-point tests (and bench_resync)
    beam_data   small files with awkward payloads for the Beam tests
    torch_data  small file sets for the torch dataset tests
    jobs        running a pipeline's main() in-process and reading its output
    rss         peak RSS of a process tree (memory tests, bench)
    codecs      the codecs tests run over (from `tfrecord_beam.compression`), compress/decompress

pytest fixtures (functions tests take as arguments) stay in conftest.py; tests never import
conftest.
"""

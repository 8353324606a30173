"""The Beam side's file layer (Beam FileSystems): read, size, glob, atomic write."""

import os

from tfrecord_beam.beam import _fs


def test_atomic_output_appears_only_on_commit(tmp_path):
    target = str(tmp_path / "out.bin")
    with _fs.atomic_output(target) as (handle, commit):
        handle.write(b"payload")
        assert not os.path.exists(target)
        commit()
    assert _fs.open_input(target).read() == b"payload"
    assert _fs.file_size("file://" + target) == 7
    with _fs.atomic_output(target) as (handle, _commit):
        handle.write(b"never committed")
    assert _fs.open_input(target).read() == b"payload"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_expand_sorts_matches_and_keeps_plain_paths(tmp_path):
    for name in ("b.tfrecord", "a.tfrecord", "c.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert _fs.expand(str(tmp_path / "*.tfrecord")) == [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    assert _fs.expand(["file://" + str(tmp_path / "c.txt")]) == [str(tmp_path / "c.txt")]
    assert _fs.exists(str(tmp_path / "c.txt")) and not _fs.exists(str(tmp_path / "d.txt"))


def test_open_input_seeks(tmp_path):
    path = tmp_path / "d.bin"
    path.write_bytes(b"0123456789")
    with _fs.open_input(str(path)) as handle:
        handle.seek(4)
        assert handle.read(3) == b"456"


def test_open_input_names_the_file_as_given(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"0123456789")
    for name in (str(path), "file://" + str(path)):
        with _fs.open_input(name) as handle:
            assert handle.name == name
            handle.seek(4)
            assert handle.read(3) == b"456"
        assert handle.closed


def test_file_size_of_a_missing_file_names_it(tmp_path):
    """As the core's `fs.file_size`: FileNotFoundError naming the file (Beam's match answers an
    empty list, which read as an IndexError)."""
    import pytest

    for name in ("nope.tfrecord", "no[pe].tfrecord"):
        with pytest.raises(FileNotFoundError, match="no.*pe.*tfrecord: no such file"):
            _fs.file_size(str(tmp_path / name))


def test_importing_the_module_makes_beam_reuse_its_s3_clients():
    """An SDK worker imports _fs with the job's code but never calls set_options: the import
    alone must make Beam's S3 layer share one boto3 client per set of S3 options (a client
    per call cost a Flink worker most of its time)."""
    import sys

    from helpers import zygote

    code = (
        "from tfrecord_beam.beam import _fs\n"
        "from apache_beam.io.aws.clients.s3 import boto3_client\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "a = PipelineOptions(['--s3_endpoint_url=http://127.0.0.1:1', '--s3_region_name=us-east-1'])\n"
        "b = PipelineOptions(['--s3_endpoint_url=http://127.0.0.1:2', '--s3_region_name=us-east-1'])\n"
        "one, two, other = boto3_client.Client(a), boto3_client.Client(a), boto3_client.Client(b)\n"
        "class Elsewhere:  # options keeping their values in no `_all_options` store: read through a view\n"
        "    def __init__(self, options):\n"
        "        self.options = options\n"
        "    def view_as(self, cls):\n"
        "        return self.options.view_as(cls)\n"
        "    def get(self, name, default=None):  # how Beam's client reads options that are not PipelineOptions\n"
        "        return self.options.get_all_options().get(name, default)\n"
        "three, four = boto3_client.Client(Elsewhere(a)), boto3_client.Client(Elsewhere(b))\n"
        "print(one.client is two.client, one.client is other.client, three.client is one.client, four.client is other.client)\n"
    )
    env = dict(os.environ, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s")
    out = zygote.run([sys.executable, "-c", code], env=env, text=True, timeout=120)  # a clean process, forked
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True", "True"]


def test_reused_s3_clients_are_per_process_and_client_environment():
    """The shared boto3 client is keyed as the core's object-store clients are (`fs._filesystems`):
    options that name no credentials or endpoint take them from AWS_* variables when the client is
    made, so other variables get another client, and a forked child never uses its parent's
    (a boto3 client's connection pool is not fork-safe)."""
    import sys

    from helpers import zygote

    code = (
        "import os\n"
        "from tfrecord_beam.beam import _fs\n"
        "from apache_beam.io.aws.clients.s3 import boto3_client\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "a = PipelineOptions(['--s3_region_name=us-east-1'])\n"
        "os.environ.update(AWS_ACCESS_KEY_ID='k', AWS_SECRET_ACCESS_KEY='s', AWS_ENDPOINT_URL='http://127.0.0.1:1')\n"
        "first = boto3_client.Client(a).client\n"
        "same = boto3_client.Client(a).client is first\n"
        "os.environ['AWS_ENDPOINT_URL'] = 'http://127.0.0.1:2'\n"
        "moved = boto3_client.Client(a).client\n"
        "os.environ['AWS_ENDPOINT_URL'] = 'http://127.0.0.1:1'\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(3 if boto3_client.Client(a).client is first else 0)\n"
        "child = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
        "print(same, moved is first, moved.meta.endpoint_url, child)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    out = zygote.run([sys.executable, "-c", code], env=env, text=True, timeout=120)  # a clean process, forked
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "http://127.0.0.1:2", "0"]


def test_delete_dir_on_s3_removes_the_prefix_without_beams_list_prefix_warning(monkeypatch):
    """Beam 2.70's S3 delete of a prefix goes through its deprecated `S3IO.list_prefix`: every S3
    job printed `BeamDeprecationWarning: list_prefix is deprecated` (issue 37 item 7; `make
    test-oldest` runs this file on 2.70). No server: the listing and the deletes are stubbed."""
    import warnings

    import pytest

    s3io = pytest.importorskip("apache_beam.io.aws.s3io")
    from apache_beam.options.pipeline_options import PipelineOptions

    deleted = []

    def list_files(self, path, with_metadata=False):
        assert path == "s3://b/stage/"
        yield ("s3://b/stage/x", (1, 0.0) if with_metadata else 1)

    def delete_files(self, paths, max_batch_size=1000):
        deleted.extend(paths)
        return [(p, None) for p in paths]

    monkeypatch.setattr(s3io.S3IO, "list_files", list_files)
    monkeypatch.setattr(s3io.S3IO, "delete_files", delete_files)
    _fs.set_options(PipelineOptions(["--s3_region_name=us-east-1", "--s3_endpoint_url=http://127.0.0.1:9"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fs.delete_dir("s3://b/stage")
    assert deleted == ["s3://b/stage/x"]
    assert not [w for w in caught if "list_prefix" in str(w.message)]

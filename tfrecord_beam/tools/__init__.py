"""Command-line tools; `tfrecord2idx` is loaded on first use so `python -m` runs warning-free."""

import importlib


def __getattr__(name):
    if name == "tfrecord2idx":
        return importlib.import_module(".tfrecord2idx", __name__)
    if name == "create_index":
        return importlib.import_module(".tfrecord2idx", __name__).create_index
    raise AttributeError(name)

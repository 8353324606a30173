"""The `tfrecord` package's iterator helpers, seeded by a private RNG (the global one is untouched)."""

from __future__ import annotations

import typing
import warnings

import numpy as np

Seed = typing.Union[None, int, np.random.Generator]


def _rng(seed: Seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def cycle(iterator_fn: typing.Callable[[], typing.Iterable]) -> typing.Iterator:
    """Repeat the iterator that `iterator_fn()` makes, forever (an empty one ends it)."""
    while True:
        produced = False
        for element in iterator_fn():
            produced = True
            yield element
        if not produced:  # `tfrecord` spins forever here
            return


def sample_iterators(
    iterators: typing.List[typing.Callable[[], typing.Iterable]],
    ratios: typing.Sequence[float],
    infinite: bool = True,
    seed: Seed = None,
) -> typing.Iterator:
    """Draw from the iterators (given as zero-argument factories) in proportion to `ratios`.

    Finite mode drops each source as it runs out and ends when every source is exhausted.
    """
    ratios = np.asarray(ratios, dtype=np.float64)
    if len(ratios) != len(iterators):
        raise ValueError(f"{len(iterators)} iterators but {len(ratios)} ratios")
    if len(ratios) and (np.any(ratios < 0) or not np.isfinite(ratios).all() or ratios.sum() <= 0):
        raise ValueError(f"ratios must be non-negative, finite and not all zero: {ratios.tolist()}")
    rng = _rng(seed)
    live = [cycle(fn) if infinite else iter(fn()) for fn in iterators]
    weights = ratios / ratios.sum() if len(ratios) else ratios
    while live:
        choice = int(rng.choice(len(weights), p=weights))
        try:
            yield next(live[choice])
        except StopIteration:
            del live[choice]
            weights = np.delete(weights, choice)
            if not live or weights.sum() <= 0:
                return
            weights = weights / weights.sum()


def shuffle_iterator(iterator: typing.Iterator, queue_size: int, seed: Seed = None) -> typing.Iterator:
    """Shuffle with a buffer of `queue_size` items (each item leaves exactly once)."""
    rng = _rng(seed)
    iterator = iter(iterator)
    buffer = []
    for item in iterator:
        buffer.append(item)
        if len(buffer) >= queue_size:
            break
    else:
        if queue_size > len(buffer):
            warnings.warn(f"Number of elements in the iterator is less than the queue size (N={queue_size}).")
    for item in iterator:
        index = int(rng.integers(len(buffer)))
        out, buffer[index] = buffer[index], item
        yield out
    while buffer:
        yield buffer.pop(int(rng.integers(len(buffer))))

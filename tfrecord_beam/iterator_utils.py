"""The `tfrecord` package's iterator helpers, seeded by a private RNG (the global one is untouched)."""

from __future__ import annotations

import typing
import warnings

import numpy as np

__all__ = [
    "Seed",
    "cycle",
    "WeightedMixer",
    "sample_iterators",
    "shuffle_iterator",
]

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


class WeightedMixer:
    """Draw items from several streams in proportion to weights, with a resumable state.

    Its state (RNG state and which sources are still live) can be saved, so a resumed run
    draws exactly as the interrupted one would have (the torch datasets do that).
    Sources with weight 0 are never drawn; an exhausted source is dropped and the remaining
    weights renormalised; iteration ends when no live source is left.
    """

    def __init__(
        self,
        weights: typing.Union[typing.Sequence[float], np.ndarray],
        generator: np.random.Generator,
        state: typing.Optional[typing.Dict[str, typing.Any]] = None,
        *,
        name: str = "weights",
    ) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if len(w) == 0 or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
            raise ValueError(f"{name} must be non-negative, finite and not all zero: {w.tolist()}")
        self.weights = w
        self.generator = generator
        self.live = [bool(x > 0) for x in w]
        if state is not None:
            self.generator.bit_generator.state = state["rng"]
            self.live = list(state["live"])
        self._cumulative = None
        self._refresh()

    def _refresh(self) -> None:
        live = np.where(self.live, self.weights, 0.0)
        total = live.sum()
        self._cumulative = np.cumsum(live) / total if total > 0 else None

    def state(self) -> typing.Dict[str, typing.Any]:
        """A picklable snapshot to pass back as `state=`."""
        return {"rng": self.generator.bit_generator.state, "live": list(self.live)}

    def mix(self, streams: typing.Sequence[typing.Iterator]) -> typing.Iterator:
        """Yield items drawn from `streams` (iterators, one per weight)."""
        cumulative = self._cumulative
        while cumulative is not None:
            choice = min(int(np.searchsorted(cumulative, self.generator.random(), side="right")), len(self.live) - 1)
            while not self.live[choice]:  # float rounding at the edges: take the next live one
                choice = (choice + 1) % len(self.live)
            try:
                item = next(streams[choice])
            except StopIteration:
                self.live[choice] = False
                self._refresh()
                cumulative = self._cumulative
                continue
            yield item


def sample_iterators(
    iterators: typing.List[typing.Callable[[], typing.Iterable]],
    ratios: typing.Sequence[float],
    infinite: bool = True,
    seed: Seed = None,
) -> typing.Iterator:
    """Draw from the iterators (given as zero-argument factories) in proportion to `ratios`.

    Finite mode drops each source as it runs out and ends when every source is exhausted.
    """
    weights = np.asarray(ratios, dtype=np.float64)
    if len(weights) != len(iterators):
        raise ValueError(f"{len(iterators)} iterators but {len(weights)} ratios")
    if not iterators:
        return
    mixer = WeightedMixer(weights, _rng(seed), name="ratios")  # validates before any source opens
    yield from mixer.mix([cycle(fn) if infinite else iter(fn()) for fn in iterators])


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
            warnings.warn(
                f"Number of elements in the iterator is less than the queue size (N={queue_size}).", stacklevel=2
            )
    for item in iterator:
        index = int(rng.integers(len(buffer)))
        out, buffer[index] = buffer[index], item
        yield out
    while buffer:
        yield buffer.pop(int(rng.integers(len(buffer))))

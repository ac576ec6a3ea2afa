"""Grain adapter: the equal-steps TokenLoader as a Grain ``IterDataset``.

Grain pipelines (torchtitan, MaxText) pack per host; :class:`TokenDataset`
gives them shardkit's batches instead: every rank the same number of steps,
every document of the epoch in exactly one batch of one rank, and Grain's
checkpoint protocol on the iterator (``get_state`` / ``set_state``, so
``grain.checkpoint.CheckpointHandler`` and Orbax save and restore it). The
state is the loader's own (``TokenLoader.state_dict()``): sealed by its
checksum and bound to the data, the same on every rank, and it loads on any
world size or batch size.

    import grain
    from shardkit.grain import TokenDataset

    ds = TokenDataset("/data/corpus", seq_len=4096, batch_size=8)   # rank/world: env
    it = iter(ds.map(lambda b: {"tokens": b["input_ids"]}))          # a Grain pipeline
    batch = next(it)
    state = it.get_state()          # a JSON-serialisable dict
    ...
    it.set_state(state)             # continues exactly after that batch

Grain is imported when this module is; without it the names exist and building
one raises ImportError saying what to install. See docs/sources.md#grain.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Sequence

from shardkit.loader import TokenLoader

try:  # Grain is optional: the rest of shardkit works without it.
    import grain as _grain

    _DatasetBase: Any = _grain.IterDataset
    _IteratorBase: Any = _grain.DatasetIterator
except ImportError:  # pragma: no cover - exercised only where Grain is absent
    _grain = None
    _DatasetBase = object
    _IteratorBase = object

__all__ = ["TokenDataset", "TokenDatasetIterator"]


def _require_grain() -> None:
    if _grain is None:
        raise ImportError(
            "shardkit.grain: needs Grain (pip install grain==0.2.18); "
            "shardkit.TokenLoader works without it"
        )


class TokenDatasetIterator(_IteratorBase):
    """The iterator of a :class:`TokenDataset`: yields the loader's batches
    (dicts of numpy arrays) and runs ``num_epochs`` epochs (``None``: without
    end). ``get_state()`` is the loader's state after the last batch returned;
    ``set_state(state)`` continues from such a state (a state of another
    corpus, configuration or a tampered one is refused: ValueError naming
    it). Like every Grain iterator, one thread at a time."""

    def __init__(self, loader: TokenLoader, end_epoch: Optional[int]) -> None:
        _require_grain()
        super().__init__()
        self._loader = loader
        self._end = end_epoch
        self._pass: Any = None  # the current epoch's pass over the loader

    @property
    def loader(self) -> TokenLoader:
        """The :class:`shardkit.TokenLoader` this iterator reads."""
        return self._loader

    def __next__(self) -> Dict[str, Any]:
        self._assert_not_closed()
        fresh = False
        while True:
            if self._pass is None:
                if self._end is not None and self._loader.state_dict()["epoch"] >= self._end:
                    raise StopIteration
                self._pass = iter(self._loader)
                fresh = True
            try:
                return next(self._pass)
            except StopIteration:
                self._pass = None
                if fresh:  # an epoch without a batch: no later one has any
                    raise
                fresh = False

    def get_state(self) -> Dict[str, Any]:
        return self._loader.state_dict()

    def set_state(self, state: Dict[str, Any]) -> None:
        self._loader.load_state_dict(state)
        self._pass = None

    def __str__(self) -> str:
        return f"shardkit.grain.TokenDatasetIterator({self._loader!r})"


class TokenDataset(_DatasetBase):
    """:class:`shardkit.TokenLoader` as a Grain ``IterDataset``.

    ``tokens`` / ``offsets`` and the keyword arguments are TokenLoader's
    (a :class:`shardkit.TokenSource`, anything :func:`shardkit.open_source`
    takes, or ``.npy`` paths / arrays; ``seq_len``, ``batch_size``, ``seed``,
    ``mode``, ``num_threads``, ...). The rank and world size come from
    ``rank`` / ``world_size``, or Grain's ``shard_options``
    (``grain.sharding.ShardOptions``: ``shard_index`` / ``shard_count``), or
    the environment as for TokenLoader. ``num_epochs``: epochs an iterator
    runs from the epoch it starts in (``None``: endless; each epoch is
    reshuffled). Each ``iter(dataset)`` is a new iterator at ``epoch``'s start.
    The arguments are checked here, once (a bad one: ValueError naming it).
    """

    def __init__(
        self,
        tokens: Any,
        offsets: Any = None,
        *,
        num_epochs: Optional[int] = 1,
        shard_options: Any = None,
        **options: Any,
    ) -> None:
        self._setup(
            functools.partial(TokenLoader, tokens, offsets), num_epochs, shard_options, options
        )

    @classmethod
    def mixture(
        cls,
        sources: Sequence[Any],
        weights: Any,
        *,
        num_epochs: Optional[int] = 1,
        shard_options: Any = None,
        **options: Any,
    ) -> "TokenDataset":
        """A dataset over several sources mixed with ``weights``
        (:meth:`shardkit.TokenLoader.mixture`'s arguments)."""
        self = cls.__new__(cls)
        self._setup(
            functools.partial(TokenLoader.mixture, sources, weights),
            num_epochs,
            shard_options,
            options,
        )
        return self

    def _setup(
        self,
        make: Callable[..., TokenLoader],
        num_epochs: Optional[int],
        shard_options: Any,
        options: Dict[str, Any],
    ) -> None:
        _require_grain()
        super().__init__()
        if num_epochs is not None and (
            isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1
        ):
            raise ValueError(f"num_epochs: must be a positive integer or None, got {num_epochs!r}")
        if shard_options is not None:
            for name in ("rank", "world_size"):
                if options.get(name) is not None:
                    raise ValueError(f"{name}: give shard_options or rank/world_size, not both")
            options = dict(
                options, rank=shard_options.shard_index, world_size=shard_options.shard_count
            )
        self._make = functools.partial(make, **options)
        self._num_epochs = num_epochs
        # Built now so that bad arguments fail here; the first iterator takes it.
        self._spare: Optional[TokenLoader] = self._make()
        self._first_epoch = self._spare.state_dict()["epoch"]

    @property
    def num_steps(self) -> Optional[int]:
        """Equal steps: the batches of one epoch, the same on every rank."""
        loader = self._spare if self._spare is not None else self._make()
        return loader.num_steps

    def __iter__(self) -> TokenDatasetIterator:
        loader, self._spare = self._spare, None
        if loader is None:
            loader = self._make()
        end = None if self._num_epochs is None else self._first_epoch + self._num_epochs
        return TokenDatasetIterator(loader, end)

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled (Grain's worker processes) as the recipe, not a built loader.
        state = dict(self.__dict__)
        state["_spare"] = None
        return state

    def __str__(self) -> str:
        return f"shardkit.grain.TokenDataset(num_epochs={self._num_epochs})"

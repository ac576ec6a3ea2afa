"""The mixture loader behind :meth:`shardkit.TokenLoader.mixture`: argument
conversion and forwarding to the core's MixtureLoader
(shardkit/loader/mixture_loader.h), which owns the order, the epochs, the
state, resume with changed weights and the mixture loader's rules."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from shardkit import _core
from shardkit._core import Mixture
from shardkit._states import require_state as _require_state
from shardkit.loader import TokenLoader, _open_source


def _open_sources(sources: Any, token_dtype: str) -> List[Any]:
    """The core sources of ``sources``: (tokens, offsets) pairs or paths."""
    if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
        raise ValueError("sources: expected a list of (tokens, offsets) pairs or directories")
    opened = []
    for k, entry in enumerate(sources):
        if isinstance(entry, (tuple, list)):
            if len(entry) != 2:
                raise ValueError(
                    f"sources: entry {k} has {len(entry)} items; expected (tokens, offsets)"
                )
            opened.append(_open_source(entry[0], entry[1], token_dtype))
        else:
            opened.append(_open_source(entry, None, token_dtype))
    return opened


class _MixtureTokenLoader(TokenLoader):
    """A TokenLoader whose order stage is a :class:`shardkit.Mixture` over several
    sources (built by :meth:`TokenLoader.mixture`): it forwards to the core's
    mixture loader (shardkit/loader/mixture_loader.h), which owns the order, the
    epochs, the state, resume with changed weights and the mixture's rules."""

    def __init__(
        self,
        sources: Sequence[Any],
        weights: Any,
        *,
        by: str,
        samples: Optional[int],
        block: Optional[int],
        seed: int,
        schedule: Any,
        interpolation: str,
        schedule_unit: str,
        repeat: Any,
        epoch: int,
        token_dtype: str,
        options: Dict[str, Any],
    ) -> None:
        # The mixture loader's rules (shuffle off, no file sharding, no
        # continuous mode, at least one source) are the core's
        # (shardkit/loader/mixture_loader.cc); here only the arguments' shapes.
        for name in ("tokens", "offsets"):
            if name in options:
                raise ValueError(f"{name}: not an argument of a mixture loader (give sources)")
        self._sources = _open_sources(sources, token_dtype)
        self._mixture_args = dict(
            weights=weights,
            by=by,
            block=block,
            schedule=schedule,
            interpolation=interpolation,
            schedule_unit=schedule_unit,
            repeat=repeat,
            samples=samples,
        )
        options.setdefault("shuffle", False)  # the mixture is the order
        super().__init__(None, None, seed=seed, epoch=epoch, **options)

    def _open(self, tokens: Any, offsets: Any, token_dtype: str) -> Any:
        return None  # the sources are opened above; the core makes each epoch's view

    def _make(self, **kwargs: Any) -> Any:
        return _core._MixtureLoader(self._sources, **self._mixture_args, **kwargs, **self._options)

    @property
    def mixture(self) -> Mixture:
        """The mixture the loader reads now (after a resume with other weights,
        the one from the change on)."""
        return self._loader.mixture

    @property
    def file_policy(self) -> Optional[_core.WhaleChoice]:
        return None  # no file sharding with a mixture

    @property
    def num_steps(self) -> Optional[int]:
        return self._loader.num_steps

    # -- state: the loader's state and the order it reads ------------------------
    def state_dict(self) -> Dict[str, Any]:
        """``{"version", "kind": "mixture_loader", "epoch", "samples", "mixture",
        "loader", "checksum"}``: the loader's state (``"loader"``) and the
        mixture(s) its epoch reads, JSON-serialisable (weights as strings,
        exact), sealed: an edited state is refused."""
        return self._loader.state()

    def state_at(self, steps: int) -> Dict[str, Any]:
        return self._loader.state_at(_core._index(steps, "steps"))

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continue from ``state`` (as :meth:`TokenLoader.load_state_dict`). When
        this loader's weights (or schedule) differ from the ones the state's run
        used, the run changes weights at the state's read point: the documents
        of the epoch the plan has already read stay as they were, the rest of
        the epoch (and later epochs) follow this loader's weights, every source
        continuing from its consumed count (nothing repeated or skipped within
        a source). ``last_resume`` says ``(changed, read, at)``."""
        _require_state(state)
        self._loader.load(state)

    @property
    def last_resume(self) -> Optional[Tuple[bool, int, int]]:
        """After :meth:`load_state_dict`: ``(changed, read, at)``; None before."""
        return self._loader.last_resume

    @property
    def changes(self) -> List[int]:
        """Global sample positions where the weights changed (on resume), from
        the current epoch's window on."""
        return self._loader.order.changes

    def window(self, epoch: Optional[int] = None) -> Tuple[int, int]:
        """(first, count): the mixture samples epoch ``epoch`` (default: the
        current one) reads, [first, first + count)."""
        return self._loader.order.window(self._standing_epoch if epoch is None else epoch)

    def window_samples(self, epoch: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(sources, items) of every document of the epoch's window: document
        ``d`` of a batch is item ``items[d]`` of source ``sources[d]`` (16 bytes
        per sample of the window; batches carry their own ``sources`` and
        ``items``)."""
        e = self._standing_epoch if epoch is None else epoch
        _, count = self.window(e)
        return self._loader.locate(e, 0, count)

    @property
    def num_documents(self) -> int:
        return self._loader.num_documents

    @property
    def samples_per_epoch(self) -> int:
        return self._loader.samples

    def __repr__(self) -> str:
        return (
            f"TokenLoader.mixture(sources={self.mixture.num_sources}, "
            f"samples={self.samples_per_epoch}, seq_len={self._options['seq_len']}, "
            f"batch_size={self._options['batch_size']}, "
            f"rank={self.rank}/{self.world_size}, epoch={self.epoch})"
        )

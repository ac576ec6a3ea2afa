"""The loader :meth:`shardkit.TokenLoader.mixture` returns: the shared loader
surface over the core's MixtureLoader (shardkit/loader/mixture_loader.h), which
owns the order, the epochs, the state, resume with changed weights and the
mixture loader's rules; here only the members a mixture adds."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from shardkit import _core
from shardkit._forward import Forwarded as _Forwarded
from shardkit._loader_base import LoaderSurface as _LoaderSurface
from shardkit._loader_base import core_sources as _core_sources
from shardkit._loader_base import loader_options as _loader_options

__all__ = ["MixtureTokenLoader"]


class MixtureTokenLoader(_LoaderSurface):
    """A loader whose order stage is a :class:`shardkit.Mixture` over several
    sources (made by :meth:`shardkit.TokenLoader.mixture`, which documents the
    arguments); ``options`` are :class:`shardkit.TokenLoader`'s keywords."""

    def __init__(
        self,
        sources: Sequence[Any],
        weights: Any,
        *,
        token_dtype: str,
        mixture: Dict[str, Any],
        options: Dict[str, Any],
    ) -> None:
        self.roles, options = _loader_options(options)
        self._loader = _core._MixtureLoader(
            _core_sources(sources, _core._str(token_dtype, "token_dtype")),
            weights,
            **mixture,
            **options,
        )
        self._options = self._loader.options

    mixture = _Forwarded[_core.Mixture](
        "_loader.mixture",
        doc="""The mixture the loader reads now (after a resume with other weights,
        the one from the change on).""",
    )

    def state_dict(self) -> Dict[str, Any]:
        """``{"version", "kind": "mixture_loader", "epoch", "samples", "mixture",
        "loader", "checksum"}``: the loader's state (``"loader"``) and the
        mixture(s) its epoch reads, JSON-serialisable (weights as strings,
        exact), sealed: an edited state is refused."""
        return self._loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        """Continue from ``state`` (as :meth:`TokenLoader.load_state_dict`). When
        this loader's weights (or schedule) differ from the ones the state's run
        used, the run changes weights at the state's read point: the documents
        of the epoch the plan has already read stay as they were, the rest of
        the epoch (and later epochs) follow this loader's weights, every source
        continuing from its consumed count (nothing repeated or skipped within
        a source). ``last_resume`` says ``(changed, read, at)``."""
        super().load_state_dict(state)

    last_resume = _Forwarded[Optional[Tuple[bool, int, int]]](
        "_loader.last_resume",
        doc="After :meth:`load_state_dict`: ``(changed, read, at)``; None before.",
    )

    changes = _Forwarded[List[int]](
        "_loader.order.changes",
        doc="""Global sample positions where the weights changed (on resume), from
        the current epoch's window on.""",
    )

    def window(self, epoch: Optional[int] = None) -> Tuple[int, int]:
        """(first, count): the mixture samples epoch ``epoch`` (default: the
        one the loader stands in) reads, [first, first + count)."""
        return self._loader.order.window(self._loader.standing_epoch if epoch is None else epoch)

    def window_samples(self, epoch: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(sources, items) of every document of the epoch's window: document
        ``d`` of a batch is item ``items[d]`` of source ``sources[d]`` (16 bytes
        per sample of the window; batches carry their own ``sources`` and
        ``items``)."""
        e = self._loader.standing_epoch if epoch is None else epoch
        return self._loader.locate(e, 0, self.window(e)[1])

    samples_per_epoch = _Forwarded[int]("_loader.samples")

    def __repr__(self) -> str:
        o = self._options
        return (
            f"TokenLoader.mixture(sources={self.mixture.num_sources}, "
            f"samples={self.samples_per_epoch}, seq_len={o['seq_len']}, "
            f"batch_size={o['batch_size']}, rank={o['rank']}/{o['world_size']}, "
            f"epoch={self.epoch})"
        )

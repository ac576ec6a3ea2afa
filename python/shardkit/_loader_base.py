"""What :class:`shardkit.TokenLoader` and :meth:`shardkit.TokenLoader.mixture`
share: the surface both forward to their core engine (``_core._TokenLoader`` or
``_core._MixtureLoader``, whose bindings spell these members alike), the
options as the edges spell them, and the sources given as tokens/offsets.
The rules (defaults, validation, epochs, states, resume choice) are the core's
(shardkit/loader/loader.h, mixture_loader.h); here only spelling."""

from __future__ import annotations

import abc
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from shardkit import _core
from shardkit._states import require_state as _require_state
from shardkit.eval import rank_and_world
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.sources import TokenSource, open_source

__all__ = ["LoaderSurface", "core_source", "core_sources", "loader_options"]


def _is_paths(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (str, os.PathLike)) for v in value
    )


def core_source(tokens: Any, offsets: Any, token_dtype: str) -> Any:
    """The core source (``_core._TokenSource``) of a loader's ``tokens`` /
    ``offsets``: a TokenSource, anything :func:`shardkit.open_source` takes
    (``offsets=None``: the format from the files), a pair of paths or a pair of
    arrays (checked and converted by the binding, ``_TokenSource.of``)."""
    if isinstance(tokens, TokenSource):
        if offsets is not None:
            raise ValueError("offsets: must be None with a TokenSource")
        return tokens._core
    if offsets is None and (isinstance(tokens, (str, os.PathLike)) or _is_paths(tokens)):
        return open_source(tokens, token_dtype=token_dtype)._core
    return _core._TokenSource.of(tokens, offsets, token_dtype=token_dtype)


def core_sources(sources: Any, token_dtype: str) -> List[Any]:
    """The core sources of a mixture's ``sources``: (tokens, offsets) pairs or
    what :func:`core_source` takes alone."""
    if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
        raise ValueError("sources: expected a list of (tokens, offsets) pairs or directories")
    opened = []
    for k, entry in enumerate(sources):
        if isinstance(entry, (tuple, list)) and len(entry) != 2:
            raise ValueError(
                f"sources: entry {k} has {len(entry)} items; expected (tokens, offsets)"
            )
        pair = entry if isinstance(entry, (tuple, list)) else (entry, None)
        opened.append(core_source(pair[0], pair[1], token_dtype))
    return opened


def loader_options(given: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """(roles, options): ``given``'s LoaderOptions fields by their core names,
    with the rank, world size and context-parallel rank/size from ``roles`` (a
    shardkit.DataRoles) or ``mesh`` + ``data_axes`` when given, else from the
    launcher (:func:`shardkit.rank_and_world`); every other key stays for the
    core to name (an unknown option is a ValueError naming it)."""
    options = dict(given)
    roles = resolve_roles(options.pop("roles", None), options.pop("mesh", None),
                          options.pop("data_axes", None))  # fmt: skip
    for name, default in (("cp_size", 1), ("cp_rank", 0)):
        if options.get(name) is None:
            options[name] = getattr(roles, name, default) if roles is not None else default
    options["rank"], options["world_size"] = rank_and_world(
        *data_rank_and_world(options.get("rank"), options.get("world_size"), roles)
    )
    return roles, options


class LoaderSurface(abc.ABC):
    """The members of a loader, each forwarded to the core engine ``_loader``
    (see :class:`shardkit.TokenLoader` for their meaning); ``_options`` are
    the options as the core holds them."""

    _loader: Any
    _options: Dict[str, Any]

    @property
    def rank(self) -> int:
        return self._options["rank"]

    @property
    def world_size(self) -> int:
        return self._options["world_size"]

    @property
    def equal_steps(self) -> bool:
        return self._options["equal_steps"]

    @property
    def num_documents(self) -> int:
        """Documents the current epoch reads (a mixture loader: its window)."""
        return self._loader.num_documents

    @property
    def epoch(self) -> int:
        """The epoch of the current pass; when a pass has run out, the epoch it
        ran (the loader then stands at the start of the next one, which
        ``state_dict()`` names), so ``set_epoch(epoch + 1)`` after a pass and a
        plain next ``for`` loop both continue with the next epoch."""
        return self._loader.epoch

    @property
    def file_policy(self) -> Optional[_core.WhaleChoice]:
        """With ``shard_files``: the Whale rule applied to the files (a
        :class:`shardkit.WhaleChoice`: ``remainder``, ``shuffle``, ``reason``,
        ``warning``); ``None`` otherwise."""
        return self._loader.file_policy

    @property
    def dropped(self) -> int:
        """Documents dropped so far this epoch (oversize="drop")."""
        return self._loader.dropped

    @property
    def num_steps(self) -> Optional[int]:
        """Equal steps: the steps of the whole epoch, the same on every rank and
        after a resume (batches carry ``step`` = first_step, first_step + 1, ...,
        so a schedule keyed on the step continues); None per rank."""
        return self._loader.num_steps

    @property
    def first_step(self) -> Optional[int]:
        """Equal steps: the step of the epoch the next pass starts at (0 at the
        epoch's start; after a resume, the steps before the state, counted as
        ``TrainPlan.first_step``); None per rank. A pass yields ``num_steps -
        first_step`` batches."""
        return self._loader.first_step

    @property
    def plan_summary(self) -> Optional[_core.TrainSummary]:
        """Equal steps: the plan's :class:`TrainSummary` (packs, tokens,
        lower_bound, filler_rows, dropped, per-step imbalance), as
        :attr:`TrainPlan.summary`; None for a loader packing per rank."""
        return self._loader.plan_summary

    @property
    def fingerprint(self) -> int:
        """Equal steps: the plan's fingerprint; ranks compare it once at start
        (``shardkit.torch.check_plan(loader)``) so that a rank built with
        another configuration fails instead of hanging."""
        return self._loader.fingerprint

    def describe(self) -> str:
        return self._loader.describe()

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        # One pass: several threads iterating at once share its batches (each to
        # one of them) and all end with it; the core then stands in the next epoch.
        loader = self._loader
        pass_id = loader.begin_pass()
        while (batch := loader.next(pass_id)) is not None:
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Moves to the start of ``epoch``, unless the loader already stands in
        ``epoch`` (resumed, or the previous epoch ran out): then it keeps its
        position (see the class docstring)."""
        self._loader.set_epoch(epoch)

    def state_at(self, steps: int) -> Dict[str, Any]:
        """Equal steps: the state of this rank after ``steps`` batches of this
        pass (whichever dataloader worker produced them; the batch of step
        ``s`` is the pass's ``s - first_step``-th), the same on every rank."""
        return self._loader.state_at(_core._index(steps, "steps"))

    def state_dict(self) -> Dict[str, Any]:
        """The state after the last batch delivered: JSON-serialisable, sealed."""
        return self._loader.state_dict()

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continue from ``state``: this consumer's own state (exact resume), a
        merged state, or the list of the states of every consumer of a run (this
        consumer's own among them, else their merge: resume on any world size /
        worker count)."""
        _require_state(state)
        self._loader.load_state_dict(list(state) if isinstance(state, (list, tuple)) else state)

    @staticmethod
    def merge_states(states: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """One state per consumer (rank x worker) of a run -> a merged state from
        which any number of consumers delivers the rest of the epoch exactly once
        (mixture loader states merge as such, keeping their order)."""
        return _core._merge_loader_states(list(states))

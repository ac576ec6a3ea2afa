"""The one check every ``load_state_dict`` makes before it reads a state.

``None`` (or anything that is not what ``state_dict()`` returned) is not a
state: before issue 20, ``load_state_dict(None)`` silently restarted the epoch.
The state itself is read and checked by the core (sealed, bound to its data).
"""

from typing import Any

__all__ = ["require_state"]


def require_state(state: Any) -> Any:
    """Returns ``state``; ValueError naming ``state`` when it is None."""
    if state is None:
        raise ValueError(
            "state: None is not a state (pass what state_dict() returned; to start an epoch "
            "afresh, make a new loader or call set_epoch)"
        )
    return state

"""A read-only attribute read from the core object a Python class wraps.

``num_steps = Forwarded[int]("_plan.num_steps", doc="...")`` in a class body is a
typed ``property`` of one line: reading it returns ``self._plan.num_steps``,
setting or deleting it raises AttributeError, and type checkers see ``int``
(a descriptor whose ``__get__`` returns the type argument).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Generic, Optional, TypeVar, overload

__all__ = ["Forwarded"]

T = TypeVar("T")


class Forwarded(Generic[T]):
    """The attribute at dotted path ``path`` of the instance, read-only."""

    def __init__(self, path: str, doc: Optional[str] = None) -> None:
        self._get = attrgetter(path)
        self.__doc__ = doc
        self._name = path

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> Forwarded[T]: ...

    @overload
    def __get__(self, obj: object, owner: Optional[type] = None) -> T: ...

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        return self if obj is None else self._get(obj)

    def __set__(self, obj: object, value: Any) -> None:
        raise AttributeError(f"{self._name} is read-only")

    def __delete__(self, obj: object) -> None:
        raise AttributeError(f"{self._name} is read-only")

"""Immutable records without `dataclasses`, which loads `inspect`, `ast` and `dis` and
writes each class's methods with `exec`: in an agent that is ~10 ms of every start and
wake before its first answer (docs/benchmarks.md, issue 14).

Stdlib only, imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Tuple, TypeVar

    _V = TypeVar("_V", bound="Value")


class Value:
    """What `@dataclasses.dataclass(frozen=True)` gave the runtime's records: the fields
    (`FIELDS`: the parameters of the subclass's `__init__`, in order, so each field is
    written once as a parameter and once as a typed attribute) set once by `__init__`
    through `_init`, equality and hash by value within one class, a repr naming them, no
    assignment afterwards, and `replace` (what `dataclasses.replace` did)."""

    __slots__ = ()
    FIELDS: Tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__init__.__code__
        cls.FIELDS = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]

    def _init(self, values: Dict[str, Any]) -> None:
        """Set every field from `values` (an `__init__`'s `locals()`)."""
        for name in self.FIELDS:
            object.__setattr__(self, name, values[name])

    def _values(self) -> Tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def replace(self: _V, **changes: Any) -> _V:
        """A copy with `changes` (an unknown field: TypeError, from `__init__`)."""
        values = {name: getattr(self, name) for name in self.FIELDS}
        values.update(changes)
        return self.__class__(**values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("cannot assign to field %r" % name)

    def __delattr__(self, name: str) -> None:
        raise AttributeError("cannot delete field %r" % name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Value) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "%s(%s)" % (
            type(self).__qualname__,
            ", ".join("%s=%r" % (name, getattr(self, name)) for name in self.FIELDS),
        )

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return self.__class__, self._values()

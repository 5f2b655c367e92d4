"""Plain data to JSON and back, checked against type hints.

What gradfix reads from a file or pipe another process wrote (a cache entry, a script's run result)
is data of the expected shape or it is rejected with ``UnexpectedData``: never code to run, as a
pickle would be. A dataclass is an object with exactly its fields, each checked against its hint
(``bool`` is not an ``int``, though an ``int`` is a ``float``; a missing or extra field is an
error); bytes are base64 text; sets, tuples and lists are arrays; a dict is an array of key-value
pairs (keys need not be strings); an enum is its value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import itertools
import json
import types
import typing
from functools import lru_cache, partial
from typing import Any, Callable, Hashable, Iterable, TypeVar

T = TypeVar("T")


class UnexpectedData(ValueError):
    """The bytes are not JSON of the expected type."""


def dumps(value: Any, hint: Any) -> bytes:
    return json.dumps(_encode(value, hint), separators=(",", ":")).encode()


def loads(data: bytes, hint: type[T]) -> T:
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise UnexpectedData(f"not JSON: {error}") from None
    try:
        decoded: T = _decoder(typing.cast(Hashable, hint))(parsed)  # (a hint is hashable: lru_cache keys by it)
        return decoded
    except _Misfit as misfit:
        raise UnexpectedData(f"${''.join(reversed(misfit.place))}: {misfit.reason}") from None
    except RecursionError:
        raise UnexpectedData("nested too deep") from None


def _encode(value: Any, hint: Any) -> Any:
    optional = _optional(hint)
    if optional is not None:
        return None if value is None else _encode(value, optional)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return {name: _encode(getattr(value, name), field) for name, field in _fields(hint).items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value.value
    if hint is bytes:
        return base64.b64encode(value).decode("ascii")
    if hint in (str, int, float, bool):
        return value
    if origin in (list, set, frozenset) or origin is tuple and args[1:] == (...,):
        return [_encode(item, args[0]) for item in value]
    if origin is tuple:
        return [_encode(item, item_hint) for item, item_hint in zip(value, args, strict=True)]
    if origin is dict:
        return [[_encode(key, args[0]), _encode(item, args[1])] for key, item in value.items()]
    raise TypeError(f"no JSON form for {hint!r}")


class _Misfit(Exception):
    """Data not of its hint: why, and where (the steps into the data, innermost first, added as
    the decoders it passed through unwind: no decoder spells where it is unless data misfits)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.place: list[str] = []


Decoder = Callable[[Any], Any]


@lru_cache(maxsize=None)
def _decoder(hint: Any) -> Decoder:
    """How data of ``hint`` is checked and decoded, worked out once for each hint (a cache entry
    of a file with nothing found is decoded in a few steps, not by reading the hints of each of
    its values again)."""
    optional = _optional(hint)
    if optional is not None:
        present = _decoder(optional)
        return lambda data: None if data is None else present(data)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_decoder(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return partial(_enum, hint)
    if hint is bytes:
        return _bytes
    if hint is float:
        return _float
    if hint in (str, int, bool):
        return partial(_checked, kind=hint)
    if origin in (list, set, frozenset) or origin is tuple and args[1:] == (...,):
        return partial(_items, origin, _decoder(args[0]))
    if origin is tuple:
        return partial(_tuple, tuple(map(_decoder, args)))
    if origin is dict:
        return partial(_pairs, _decoder(args[0]), _decoder(args[1]))
    raise TypeError(f"no JSON form for {hint!r}")


def _dataclass_decoder(cls: type) -> Decoder:
    names = _fields(cls).keys()
    decoders: list[tuple[str, Decoder]] = []  # made at the first value, so that a class may hold itself

    def decode(data: Any) -> Any:
        if not isinstance(data, dict) or data.keys() != names:
            raise _Misfit(f"not the fields of {cls.__name__}")
        if not decoders:
            decoders.extend((name, _decoder(field)) for name, field in _fields(cls).items())
        try:
            return cls(**{name: decode_field(data[name]) for name, decode_field in decoders})
        except _Misfit:  # said at its field, found as ``_each`` finds an item
            for name, decode_field in decoders:
                try:
                    decode_field(data[name])
                except _Misfit as misfit:
                    misfit.place.append(f".{name}")
                    raise misfit from None
            raise

    return decode


def _enum(cls: type[enum.Enum], data: Any) -> enum.Enum:
    try:
        return cls(data)
    except (ValueError, TypeError):
        raise _Misfit(f"not a {cls.__name__}") from None


def _bytes(data: Any) -> bytes:
    try:
        return base64.b64decode(_checked(data, str), validate=True)
    except binascii.Error:
        raise _Misfit("not base64") from None


def _float(data: Any) -> float:
    return float(data) if type(data) is int else _checked(data, float)  # an int is a float to type hints (PEP 484)


def _items(container: Callable[[list[Any]], Any], decode: Decoder, data: Any) -> Any:
    return container(_each(_checked(data, list), itertools.repeat(decode)))


def _tuple(decoders: tuple[Decoder, ...], data: Any) -> tuple[Any, ...]:
    if len(_checked(data, list)) != len(decoders):
        raise _Misfit(f"not {len(decoders)} items")
    return tuple(_each(data, decoders))


def _pairs(decode_key: Decoder, decode_item: Decoder, data: Any) -> dict[Any, Any]:
    pairs = _each(_checked(data, list), itertools.repeat(partial(_checked, kind=list)))
    if any(len(pair) != 2 for pair in pairs):
        raise _Misfit("not key-value pairs")
    return dict(_each(pairs, itertools.repeat(lambda pair: (decode_key(pair[0]), decode_item(pair[1])))))


def _each(items: list[Any], decoders: Iterable[Decoder]) -> list[Any]:
    """Each of ``items`` decoded by the decoder beside it (``decoders``: one each, or one repeated),
    a misfit said at its index (found by decoding them again one by one: only data that misfits
    pays for counting)."""
    try:
        return [decode(item) for item, decode in zip(items, decoders)]
    except _Misfit:
        for index, (item, decode) in enumerate(zip(items, decoders)):
            try:
                decode(item)
            except _Misfit as misfit:
                misfit.place.append(f"[{index}]")
                raise misfit from None
        raise


def _checked(data: Any, kind: type) -> Any:
    if type(data) is not kind:  # exactly: True is not an int
        raise _Misfit(f"not a {kind.__name__}")
    return data


def _optional(hint: Any) -> Any:
    """``X`` for ``X | None`` or ``Optional[X]``, else None."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return None
    others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if len(others) != 1:
        raise TypeError(f"no JSON form for {hint!r}: only a union with None has one")
    return others[0]


@lru_cache(maxsize=None)
def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(cls)}

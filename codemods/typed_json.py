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
import json
import types
import typing
from functools import lru_cache
from typing import Any, TypeVar

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
        decoded: T = _decode(parsed, hint, "$")
        return decoded
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


def _decode(data: Any, hint: Any, where: str) -> Any:
    optional = _optional(hint)
    if optional is not None:
        return None if data is None else _decode(data, optional, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        fields = _fields(hint)
        if not isinstance(data, dict) or data.keys() != fields.keys():
            raise UnexpectedData(f"{where}: not the fields of {hint.__name__}")
        return hint(**{name: _decode(data[name], field, f"{where}.{name}") for name, field in fields.items()})
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except (ValueError, TypeError):
            raise UnexpectedData(f"{where}: not a {hint.__name__}") from None
    if hint is bytes:
        try:
            return base64.b64decode(_checked(data, str, where), validate=True)
        except binascii.Error:
            raise UnexpectedData(f"{where}: not base64") from None
    if hint is float and type(data) is int:  # an int is a float to type hints (PEP 484)
        return float(data)
    if hint in (str, int, float, bool):
        return _checked(data, hint, where)
    if origin in (list, set, frozenset) or origin is tuple and args[1:] == (...,):
        return origin(_decode(item, args[0], f"{where}[{i}]") for i, item in enumerate(_checked(data, list, where)))
    if origin is tuple:
        if len(_checked(data, list, where)) != len(args):
            raise UnexpectedData(f"{where}: not {len(args)} items")
        return tuple(_decode(item, item_hint, f"{where}[{i}]") for i, (item, item_hint) in enumerate(zip(data, args)))
    if origin is dict:
        pairs = [_checked(pair, list, f"{where}[{i}]") for i, pair in enumerate(_checked(data, list, where))]
        if any(len(pair) != 2 for pair in pairs):
            raise UnexpectedData(f"{where}: not key-value pairs")
        return {_decode(key, args[0], f"{where}[{i}]"): _decode(item, args[1], f"{where}[{i}]") for i, (key, item) in enumerate(pairs)}
    raise TypeError(f"no JSON form for {hint!r}")


def _checked(data: Any, kind: type, where: str) -> Any:
    if type(data) is not kind:  # exactly: True is not an int
        raise UnexpectedData(f"{where}: not a {kind.__name__}")
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

"""The JSON-RPC converter: custom params stay plain dicts, validated by pydantic in the handlers."""

from __future__ import annotations

from typing import Any

import attrs
from cattrs import Converter
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)


def _envelope_hook(obj: Any, cls: type[Any]) -> Any:
    if not isinstance(obj, dict):
        raise TypeError(f"a JSON-RPC message must be an object, not {type(obj).__name__}")
    names = {field.name for field in attrs.fields(cls)}
    fields = {key: value for key, value in obj.items() if key in names}
    if "params" in names:
        fields.setdefault("params", None)  # JSON-RPC 2.0: params MAY be omitted
    return cls(**fields)


def dict_converter() -> Converter:
    """pygls's converter with plain-dict params for requests, notifications and responses."""
    converter: Converter = default_converter()  # type: ignore[no-untyped-call]
    for envelope in (JsonRPCRequestMessage, JsonRPCResponseMessage, JsonRPCNotification):
        converter.register_structure_hook(envelope, _envelope_hook)
    return converter

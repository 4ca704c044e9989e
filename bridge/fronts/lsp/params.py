"""Request params validated against the contract's models: a failure is InvalidParams naming each
offending field, the answer every handler gives to bad input."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pygls.exceptions import JsonRpcInvalidParams

Model = TypeVar("Model", bound=BaseModel)


def parse_params(model: type[Model], raw: Any) -> Model:
    """Validate raw params; a failure is InvalidParams naming each offending field."""
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'params'}: {error['msg']}"
            for error in exc.errors()
        ]
        raise JsonRpcInvalidParams(
            message="invalid params: " + "; ".join(problems),
            data=[{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()],
        ) from None

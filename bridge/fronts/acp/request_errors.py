"""The ACP front's JSON-RPC errors: invalid params, one readable line per field; failed runs."""

from __future__ import annotations

from typing import Final

from acp import RequestError
from pydantic import ValidationError

from bridge.runs.conversation_admin import ConversationAdminError

# A failed run answers this JSON-RPC error code (server-defined range), its data says why.
RUN_FAILED: Final = -32000
# A session (or a checkpoint of it) that is not there.
NOT_FOUND: Final = -32002


def invalid_params(exc: ValidationError) -> RequestError:
    """-32602 with one readable line per field (the SDK puts raw pydantic errors in `data`)."""
    problems = [
        {"field": ".".join(str(part) for part in error["loc"]) or "params", "message": error["msg"]}
        for error in exc.errors()
    ]
    text = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return RequestError(-32602, f"invalid params: {text}", {"errors": problems})


def admin_failed(exc: ConversationAdminError, session_id: object, *, not_found: bool = True) -> RequestError:
    """A session tool's failure: -32002 for what is not there (when `not_found` tells it apart),
    else a failed run's code."""
    code = NOT_FOUND if not_found and exc.not_found else RUN_FAILED
    return RequestError(code, str(exc), {"sessionId": session_id})

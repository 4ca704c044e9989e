"""pi's extension dialogs (rpc `extension_ui_request`) read into agent-neutral `Dialog`s, and the
user's reply written back as the `extension_ui_response` line pi waits for.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bridge.agents.values import Dialog, DialogKind, DialogReply

#: The dialogs that block the extension until they are answered (pi's docs/rpc-extension-ui.md).
BLOCKING: Final = frozenset({"select", "confirm", "input", "editor"})
MAX_TITLE: Final = 500
MAX_TEXT: Final = 64 * 1024
MAX_OPTIONS: Final = 100
MAX_OPTION: Final = 500
_LEVELS: Final = {"info": "info", "warning": "warning", "error": "error"}


def dialog_of(request: dict[str, Any]) -> Dialog | None:
    """The dialog an `extension_ui_request` asks (or a `notify` tells); None for anything else."""
    method = request.get("method")
    if method == "notify":
        return Dialog(
            kind="notify",
            title=_text(request.get("message"), MAX_TEXT),
            level=_LEVELS.get(str(request.get("notifyType")), "info"),  # type: ignore[arg-type]
        )
    if method not in BLOCKING:
        return None
    kind: DialogKind = method
    options = request.get("options")
    if kind == "select" and not (isinstance(options, list) and options):
        return None  # a select with nothing to pick: nothing the user could answer
    timeout = request.get("timeout")
    return Dialog(
        kind=kind,
        title=_text(request.get("title"), MAX_TITLE),
        message=_optional(request.get("message")),
        options=tuple(_text(option, MAX_OPTION) for option in options[:MAX_OPTIONS])
        if kind == "select" and isinstance(options, list)
        else (),
        placeholder=_optional(request.get("placeholder")),
        prefill=_optional(request.get("prefill")),
        timeout_ms=_positive(timeout),
    )


def reply_line(request_id: str, reply: DialogReply) -> bytes:
    """The `extension_ui_response` line that gives the extension `reply`."""
    answer: dict[str, Any] = {"type": "extension_ui_response", "id": request_id}
    if reply.cancelled:
        answer["cancelled"] = True
    elif reply.confirmed is not None:
        answer["confirmed"] = reply.confirmed
    elif reply.value is not None:
        answer["value"] = reply.value
    else:
        answer["cancelled"] = True
    return orjson.dumps(answer) + b"\n"


def _text(value: Any, limit: int) -> str:
    return str(value if value is not None else "")[:limit]


def _optional(value: Any) -> str | None:
    return None if value is None else _text(value, MAX_TEXT)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

"""What a model request holds: its messages, the user's text, trailing tool results, offered tools."""

from __future__ import annotations

from typing import Any, Final


def content_text(content: object, *, block_types: tuple[str, ...] = ("text",)) -> str | None:
    """Text of a message ``content`` (string or list of typed blocks), None if none."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") in block_types:
            value = block.get("text")
            if isinstance(value, str):
                texts.append(value)
    return "".join(texts) if texts else None


def request_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, dict)]


#: How the text blocks an agent adds beside the user's prompt begin.
_AGENT_CONTEXT_TAGS: Final = (
    "<system-reminder>",
    "<local-command-caveat>",
    "<command-name>",
    "<local-command-stdout>",
)


def last_user_text_of(body: dict[str, Any]) -> str | None:
    """Text of the last user message carrying text (tool results are not user text).

    Text blocks an agent adds as context before the prompt (Claude Code's `<system-reminder>`
    blocks, and the note of a local command such as the `/model` its live process is sent) are
    not the user's text.
    """
    for message in reversed(request_messages(body)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = [
                block
                for block in content
                if not (
                    isinstance(block, dict) and str(block.get("text", "")).startswith(_AGENT_CONTEXT_TAGS)
                )
            ]
        text = content_text(content)
        if text is not None:
            return text
    return None


def user_texts_of(body: dict[str, Any]) -> list[str]:
    """Texts of every user message carrying text, in order (the conversation so far)."""
    texts = []
    for message in request_messages(body):
        if message.get("role") == "user":
            text = content_text(message.get("content"))
            if text is not None:
                texts.append(text)
    return texts


def user_images_of(body: dict[str, Any]) -> list[str]:
    """Every image of the user's messages, in order, as a ``data:`` URL (mime type and base64).

    OpenAI format: ``image_url`` blocks (already data URLs). Anthropic format: ``image`` blocks with
    a base64 ``source``. An editor's test reads them to see a pasted image reach the model.
    """
    images: list[str] = []
    for message in request_messages(body):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image_url":
                image_url = block.get("image_url")
                url = image_url.get("url") if isinstance(image_url, dict) else None
                if isinstance(url, str):
                    images.append(url)
            elif block.get("type") == "image" and isinstance(block.get("source"), dict):
                source = block["source"]
                images.append(f"data:{source.get('media_type')};base64,{source.get('data')}")
    return images


def trailing_tool_result(body: dict[str, Any]) -> str | None:
    """Text of the tool result(s) the conversation ends with; None if it ends otherwise.

    OpenAI format: trailing ``role: "tool"`` messages. Anthropic format: a final user
    message holding ``tool_result`` blocks.
    """
    messages = [m for m in request_messages(body) if m.get("role") not in ("system", "developer")]
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        results: list[str] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results.append(content_text(message.get("content")) or "")
        return "\n".join(reversed(results))
    content = last.get("content")
    if last.get("role") == "user" and isinstance(content, list):
        found = False
        texts: list[str] = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found = True
                texts.append(content_text(block.get("content")) or "")
        if found:
            return "\n".join(texts)
    return None


def namespaced(tools: list[Any]) -> list[Any]:
    """The tools with a Responses API ``namespace``'s own ones in its place, each named
    ``<namespace>__<name>`` (Codex offers an MCP server's tools so: ``mcp__<server>``)."""
    flat: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            flat += [
                {**inner, "name": f"{tool.get('name')}__{inner.get('name')}"}
                for inner in tool["tools"]
                if isinstance(inner, dict)
            ]
        else:
            flat.append(tool)
    return flat


def offered_tools(body: dict[str, Any]) -> dict[str, tuple[str, frozenset[str]]]:
    """The tools a request offers: lower-cased name -> (name as offered, its argument names)."""
    tools = body.get("tools")
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for tool in namespaced(tools if isinstance(tools, list) else []):
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        spec: dict[str, Any] = function if isinstance(function, dict) else tool
        name = spec.get("name")
        schema = spec.get("input_schema") or spec.get("parameters") or {}
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(name, str):
            found[name.lower()] = (name, frozenset(props) if isinstance(props, dict) else frozenset())
    return found


def offered_tool(body: dict[str, Any], name: str) -> str:
    """`name` spelled as the request offers it (an agent may capitalize its tools), else as given."""
    return offered_tools(body).get(name, (name, frozenset()))[0]


def tool_results_count(body: dict[str, Any]) -> int:
    """How many tool results the conversation holds since its last user text."""
    count = 0
    for message in reversed(request_messages(body)):
        content = message.get("content")
        if message.get("role") == "tool":
            count += 1
        elif message.get("role") == "user":
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            ):
                count += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
            else:
                break
    return count


def tool_results_since_user(body: dict[str, Any]) -> list[str]:
    """Texts of every tool result since the last user text, in order (one per result)."""
    results: list[str] = []
    for message in reversed(request_messages(body)):
        content = message.get("content")
        if message.get("role") == "tool":
            results.append(content_text(content) or "")
        elif message.get("role") == "user":
            blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            found = [b for b in blocks if b.get("type") == "tool_result"]
            if not found:
                break
            results += [content_text(b.get("content")) or "" for b in reversed(found)]
    return list(reversed(results))

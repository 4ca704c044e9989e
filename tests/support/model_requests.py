"""What a test puts in a prompt and finds in the requests the scripted model was sent."""

from __future__ import annotations

from typing import Any

# A 1x1 PNG, base64: an image for a prompt.
PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def image_urls(body: dict[str, Any]) -> list[str]:
    """The image parts of a model request's user messages (OpenAI's chat format), as data URLs."""
    urls: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            urls += [
                p["image_url"]["url"] for p in content if isinstance(p, dict) and p.get("type") == "image_url"
            ]
    return urls


def times_seen(body: dict[str, Any], tag: str, *words: str) -> list[int]:
    """How many times one model request's user messages hold each `word-tag` (an agent may join
    several user messages in one)."""
    texts: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"text": content}]
            texts += [str(part.get("text") or "") for part in parts if isinstance(part, dict)]
    seen = "\n".join(texts)
    return [seen.count(f"{word}-{tag}") for word in words]

"""The text of a completion: a plain string, or chat messages reduced to the assistant's text.

Shared by the command line (JSONL records) and the TRL / verl adapters (trainer batches).
"""

from __future__ import annotations

import json
from typing import Any


def completion_text(value: Any) -> str:
    """Text of a completion given as a string or as chat messages (assistant content joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        parts = [_message_text(m) for m in value if isinstance(m, dict)]
        if parts or not value:
            return "\n".join(p for p in parts if p)
    raise TypeError(f"completion must be a string or chat messages, got {type(value).__name__}")


def _message_text(message: dict[str, Any]) -> str:
    if message.get("role", "assistant") != "assistant":
        return ""
    content = message.get("content")
    if isinstance(content, list):  # multimodal parts: keep the text ones
        text = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        text = "" if content is None else str(content)
    # Structured tool calls become Hermes-style text so the tool-call parsers can read them.
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            fn = call.get("function", call)
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    pass
            payload = json.dumps({"name": fn.get("name"), "arguments": args}, default=str)
            text += f"\n<tool_call>\n{payload}\n</tool_call>"
    return text

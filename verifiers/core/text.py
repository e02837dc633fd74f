"""The text of a completion: a plain string, or chat messages reduced to the assistant's text.

Shared by the command line (JSONL records) and the TRL / verl adapters (trainer batches).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


class TruncatedText(str):
    """A completion its generator cut off (a length limit, no end-of-sequence token).

    A `str` in every other respect: it passes through every API unchanged, and verifiers that
    care (math: answers found without a marker are not trusted) read the mark.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (TruncatedText, (str(self),))


def mark_truncated(text: str, truncated: bool | None = True) -> str:
    """`text` marked as cut off when `truncated` is true; as a plain `str` when it is false;
    unchanged when None (no signal)."""
    if truncated is None:
        return text
    return TruncatedText(text) if truncated else str(text)


def is_truncated(text: Any) -> bool:
    """Whether a completion carries the cut-off mark."""
    return isinstance(text, TruncatedText)


def completion_text(value: Any) -> str:
    """Text of a completion given as a string or as chat messages (assistant content joined).

    A message with ``"truncated": true`` or an OpenAI ``"finish_reason": "length"`` marks the
    text as cut off (`TruncatedText`).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        messages = [m for m in value if isinstance(m, dict)]
        parts = [_message_text(m) for m in messages]
        if parts or not value:
            text = "\n".join(p for p in parts if p)
            cut = any(m.get("truncated") is True or m.get("finish_reason") == "length"
                      for m in messages)
            return TruncatedText(text) if cut else text
    raise TypeError(f"completion must be a string or chat messages, got {type(value).__name__}")


def record_completion(record: Mapping[str, Any], key: str = "completion") -> str:
    """`completion_text` of ``record[key]``, marked as cut off when the record says so:
    ``"truncated": true`` or OpenAI's ``"finish_reason": "length"`` (KeyError without `key`).

    TypeError for a `truncated` that is not true, false or null, or a `finish_reason` that is
    not text or null: read as "no signal", a "true" string would score a cut-off answer.
    """
    text = completion_text(record[key])
    truncated, reason = record.get("truncated"), record.get("finish_reason")
    if truncated is not None and not isinstance(truncated, bool):
        raise TypeError(f"'truncated' must be true, false or null, got {type(truncated).__name__}")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"'finish_reason' must be a string or null, got {type(reason).__name__}")
    if truncated is True or reason == "length":
        return TruncatedText(text)
    return text


def _message_text(message: dict[str, Any]) -> str:
    if message.get("role", "assistant") != "assistant":
        return ""
    content = message.get("content")
    if isinstance(content, list):  # multimodal parts: keep the text ones
        text = "".join(_plain(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        text = "" if content is None else _plain(content)
    # Structured tool calls become Hermes-style text so the tool-call parsers can read them.
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            text += f"\n<tool_call>\n{_call_json(call)}\n</tool_call>"
    return text


def _call_json(call: dict[str, Any]) -> str:
    """A structured tool call as Hermes JSON; TypeError when Python cannot write it."""
    fn = call.get("function", call)
    if isinstance(fn, dict):
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                pass  # kept as the text it is: the checker judges what the model wrote
        call = {"name": fn.get("name"), "arguments": args}
    # else a call without a function object ({"function": "f"}) is written as it is, and the
    # checker reads no name in it
    try:
        return json.dumps(call, default=str)
    except (ValueError, RecursionError) as err:
        raise TypeError(f"a tool call cannot be written as JSON ({type(err).__name__})") from None


def _plain(value: Any) -> str:
    """`str(value)`; TypeError when Python cannot write it (a huge integer, deep nesting)."""
    try:
        return str(value)
    except (ValueError, RecursionError) as err:
        raise TypeError(f"message content cannot be read as text ({type(err).__name__})") from None


def eos_set(eos_token_id: int | Iterable[int] | None) -> frozenset[int]:
    """End-of-sequence ids as a set: a tokenizer's `eos_token_id` is one id, a list, or None."""
    if eos_token_id is None:
        return frozenset()
    return frozenset([int(eos_token_id)] if isinstance(eos_token_id, int) else (int(i) for i in eos_token_id))


def truncation_flag(extra_info: Mapping[str, Any] | None) -> bool | None:
    """Whether verl's `extra_info` says the response was cut off; None when it says nothing.

    verl 0.9.1 passes `compute_score` no such signal of its own (the text is decoded without
    special tokens, and its vLLM server reports "length" and "stop" alike as "completed"), so
    the flag comes from `extra_info["truncated"]` (set by `VeristepRewardManager`, or by your
    own rollout code), or a `finish_reason` / `stop_reason` of "length" there.
    """
    if not isinstance(extra_info, Mapping):
        return None
    flag = extra_info.get("truncated")
    if flag is not None and not isinstance(flag, str):
        try:
            return bool(flag)
        except (TypeError, ValueError):  # e.g. a numpy array of several values
            return None
    if isinstance(flag, str) and flag.strip().lower() in ("true", "false", "1", "0"):
        return flag.strip().lower() in ("true", "1")
    for key in ("finish_reason", "stop_reason"):
        reason = extra_info.get(key)
        if isinstance(reason, str) and reason:
            return reason == "length"
    return None

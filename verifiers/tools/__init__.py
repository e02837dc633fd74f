"""Tool-call verification: parse the calls a model wrote, validate them against the tools'
JSON schemas, and match them against the expected calls."""

from .match import ExpectedCall, StringMatch, expected_call, match_calls
from .parsers import ToolCall, ToolFormat, detect_format, parse_tool_calls, render_tool_calls
from .schema import ToolSchema, Violation
from .verifier import ToolCallVerifier, ToolReference

__all__ = [
    "ExpectedCall",
    "StringMatch",
    "ToolCall",
    "ToolCallVerifier",
    "ToolFormat",
    "ToolReference",
    "ToolSchema",
    "Violation",
    "detect_format",
    "expected_call",
    "match_calls",
    "parse_tool_calls",
    "render_tool_calls",
]

"""`ToolCallVerifier`: parse a completion's tool calls, check them against the function
schemas, and match them against the expected calls (BFCL rules) to produce a reward."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.batch import BatchRunner, as_verify_result, default_workers
from ..core.result import Status, VerifyResult
from .match import ExpectedCall, StringMatch, expected_call, match_calls
from .parsers import (
    DEFAULT_MAX_DEPTH,
    ParsedCalls,
    ToolFormat,
    parse_tool_calls,
    resolve_format,
)
from .schema import ToolSchema, Violation


@dataclass
class ToolReference:
    """A checked reference: the function schemas, the expected calls and the format."""

    tools: list[Any]
    schema: ToolSchema | None
    expected: list[ExpectedCall]
    format: ToolFormat


class ToolCallVerifier:
    """Reward 1 when the completion's calls match the expected set; statuses say why not.

    Reference: {"tools": [OpenAI function definitions], "expected": [{"name", "arguments"}],
    "format": "auto"}; a bare list is taken as "expected". `expected: []` means the model
    should not call any tool (reward 1 for no call).
    """

    kind = "tools"

    def __init__(
        self,
        workers: int | None = None,
        format: str = "auto",
        partial_credit: bool = False,
        string_match: str = "bfcl",
        think_tag: str | None = "think",
        max_depth: int = DEFAULT_MAX_DEPTH,
        closed_parameters: bool = True,
        timeout: float = 10.0,
        max_reported: int = 50,
        max_calls: int = 128,
    ) -> None:
        self.format = resolve_format(format)
        try:
            self.string_match = StringMatch(string_match)
        except ValueError:
            choices = ", ".join(m.value for m in StringMatch)
            raise ValueError(
                f"string_match must be one of {choices}, got {string_match!r}"
            ) from None
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        if max_reported < 0:
            raise ValueError(f"max_reported must be >= 0, got {max_reported}")
        if max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {max_calls}")
        self.max_calls = max_calls
        self.workers = default_workers() if workers is None else workers
        self.partial_credit = bool(partial_credit)
        self.think_tag = think_tag
        self.max_depth = max_depth
        self.closed_parameters = closed_parameters
        self.timeout = timeout
        self.max_reported = max_reported
        self._runner = BatchRunner(self._verify_item, self.workers, timeout)

    # the runner (live processes) stays behind when the verifier is sent to a worker
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_runner"] = None
        return state

    def reference_from_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """{"tools", "expected", "format"} from a JSONL line (KeyError without "expected")."""
        return {
            "tools": record.get("tools") or [],
            "expected": record["expected"],
            "format": record.get("format") or self.format.value,
        }

    def check_reference(self, reference: Any) -> ToolReference:
        """Validate and compile a reference; ValueError says what is wrong with it."""
        if isinstance(reference, ToolReference):
            return reference
        if isinstance(reference, list):
            reference = {"expected": reference}
        if not isinstance(reference, Mapping) or "expected" not in reference:
            raise ValueError(
                'a tools reference is {"tools": [...], "expected": [...], "format": ...}'
            )
        tools = reference.get("tools") or []
        schema = ToolSchema.from_tools(tools, closed=self.closed_parameters) if tools else None
        expected_raw = reference["expected"]
        if not isinstance(expected_raw, list):
            raise ValueError(
                f'"expected" must be a list of calls, got {type(expected_raw).__name__}'
            )
        expected = [
            expected_call(item, schema.get(_name_of(item)) if schema is not None else None)
            for item in expected_raw
        ]
        if schema is not None:
            unknown = [e.name for e in expected if schema.get(e.name) is None]
            if unknown:
                raise ValueError(f"expected calls use functions missing from tools: {unknown}")
        fmt = resolve_format(reference.get("format") or self.format)
        return ToolReference(list(tools), schema, expected, fmt)

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Verify one completion in this process; raises only on a malformed reference."""
        ref = self.check_reference(reference)
        try:
            return self._judge(completion, ref)
        except Exception as err:  # noqa: BLE001 - a bug of ours must not look like a model error
            return VerifyResult(
                0.0, False, Status.INTERNAL_ERROR, f"{type(err).__name__}: {err}"[:300]
            )

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """Verify many completions in worker processes, each under the per-item time limit."""
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        refs = [self.check_reference(r) for r in references]  # bad configuration fails early
        if self._runner is None:
            self._runner = BatchRunner(self._verify_item, self.workers, self.timeout)
        items = list(zip(completions, refs, strict=True))
        return [as_verify_result(result) for result in self._runner.run(items)]

    def close(self) -> None:
        """Stop the batch worker processes."""
        if self._runner is not None:
            self._runner.close()

    def _verify_item(self, item: tuple[str, ToolReference]) -> VerifyResult:
        completion, ref = item
        return self.verify(completion, ref)

    def _judge(self, completion: str, ref: ToolReference) -> VerifyResult:
        start = time.perf_counter()
        limit = max(self.max_calls, len(ref.expected))
        parsed = parse_tool_calls(
            completion,
            ref.format,
            tools=ref.tools,
            think_tag=self.think_tag,
            max_depth=self.max_depth,
            max_calls=limit,
        )
        parsed_at = time.perf_counter()
        extra = self._report(parsed)
        calls = parsed.calls
        if not calls and not parsed.errors:
            timings = {"parse_s": parsed_at - start}
            if not ref.expected:
                return VerifyResult(
                    1.0, True, Status.CORRECT, "no call, as expected", timings=timings, extra=extra
                )
            return VerifyResult(
                0.0, False, Status.NO_CALL, "no tool call found", timings=timings, extra=extra
            )

        if parsed.truncated:
            # a flood of calls is wrong whatever they contain; reading it all would only cost time
            status = Status.PARSE_ERROR if parsed.errors else Status.WRONG_COUNT
            detail = f"more than max_calls={limit} call candidates"
            timings = {"parse_s": parsed_at - start}
            return VerifyResult(0.0, False, status, detail, timings=timings, extra=extra)

        issues = [ref.schema.validate(call) if ref.schema is not None else [] for call in calls]
        reported = [
            {"call": i, **issue.to_dict()} for i, found in enumerate(issues) for issue in found
        ]
        if reported:
            extra["schema_issues"] = reported[: max(self.max_reported, 1)]
        match = match_calls(
            calls,
            ref.expected,
            ref.schema,
            self.string_match,
            eligible=[not found for found in issues],
        )
        extra["matched"] = match.matched

        if parsed.errors:
            status, detail = Status.PARSE_ERROR, parsed.errors[0].message
        elif any(issue.kind is Violation.UNKNOWN_FUNCTION for found in issues for issue in found):
            status = Status.UNKNOWN_FUNCTION
            detail = next(
                r["message"] for r in reported if r["kind"] == Violation.UNKNOWN_FUNCTION.value
            )
        elif reported:
            first = reported[0]
            status, detail = (
                Status.SCHEMA_VIOLATION,
                f"call {first['call']}: {first['path'] or '/'}: {first['message']}",
            )
        else:
            status, detail = match.status, match.detail
        correct = status is Status.CORRECT
        if correct:
            reward = 1.0
        elif self.partial_credit:
            # unreadable candidates count as calls that matched nothing
            denominator = max(parsed.n_candidates, len(ref.expected))
            reward = match.matched / denominator if denominator else 0.0
        else:
            reward = 0.0
        timings = {"parse_s": parsed_at - start, "check_s": time.perf_counter() - parsed_at}
        return VerifyResult(reward, correct, status, detail, timings=timings, extra=extra)

    def _report(self, parsed: ParsedCalls) -> dict[str, Any]:
        limit = self.max_reported
        extra: dict[str, Any] = {
            "calls": [call.to_dict() for call in parsed.calls[:limit]],
            "errors": [err.to_dict() for err in parsed.errors[:limit]],
            "format": parsed.format.value,
        }
        if len(parsed.calls) > limit or len(parsed.errors) > limit:
            extra["n_calls"], extra["n_errors"] = len(parsed.calls), len(parsed.errors)
        return extra


def _name_of(item: Any) -> str:
    if isinstance(item, Mapping):
        if isinstance(item.get("name"), str):
            return item["name"]
        if len(item) == 1:
            return str(next(iter(item)))
    return ""

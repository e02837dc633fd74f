"""`ToolCallVerifier`: parse a completion's tool calls, check them against the function
schemas, and match them against the expected calls (BFCL rules) to produce a reward.

Without expected calls (schema-only mode) the reward is 1 for any completion whose calls all
parse and fit the function schemas ("any valid call")."""

from __future__ import annotations

import contextlib
import json
import marshal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.batch import BatchRunner, as_verify_result, default_workers
from ..core.result import Status, VerifyResult
from .match import OMIT, ExpectedCall, ObjectPattern, StringMatch, expected_call, match_calls
from .parsers import (
    DEFAULT_MAX_DEPTH,
    ParsedCalls,
    ToolCall,
    ToolFormat,
    parse_tool_calls,
    resolve_format,
)
from .schema import (
    SchemaIssue,
    ToolSchema,
    Violation,
    float_integers,
    pattern_budget,
    validate_parameter,
)
from .typing_mode import (
    check_language,
    checked_arguments,
    placeholder,
    typed_arguments,
    typed_value,
)

#: Distinct references a verifier keeps checked (BFCL: about 2,500 questions, in each format).
_REFERENCE_CACHE = 16384
#: References whose JSON key `reference_key` keeps, and the largest it keeps (marshal bytes).
_KEY_CACHE = 2048
_KEY_CACHE_MAX_BYTES = 65536
_keys: dict[bytes, str] = {}


def reference_key(reference: Any) -> str:
    """The reference's canonical JSON text (sorted keys); TypeError/ValueError if it is not JSON data.

    Encoding a tools reference (its schemas) is ~40 us a row, and a batch of served rows gives
    one fresh but equal dict per row, held under the GIL that the event loop waits for. Equal
    marshal bytes mean equal values (exact types only; anything else is not marshalled), so
    they stand for the JSON text once it is known: ~5 us a row. Values that are equal but
    marshal differently (another key order) only miss the cache.
    """
    try:
        fingerprint = marshal.dumps(reference)
    except ValueError:  # a type marshal does not take: json.dumps says whether it is JSON data
        return _json_text(reference)
    key = _keys.get(fingerprint)
    if key is None:
        key = _json_text(reference)
        if len(fingerprint) <= _KEY_CACHE_MAX_BYTES:
            # no lock (a forked child must never inherit one held): two threads evicting at once
            # leave the cache a key or two over its size, which is harmless
            if len(_keys) >= _KEY_CACHE:
                with contextlib.suppress(StopIteration, RuntimeError):
                    _keys.pop(next(iter(_keys)), None)
            _keys[fingerprint] = key
    return key


class _TooDeep(ValueError):
    """A reference nested too deeply to write as JSON (json.dumps's RecursionError)."""


def _json_text(reference: Any) -> str:
    """`json.dumps` with sorted keys; _TooDeep (a ValueError) for data nested too deeply."""
    try:
        return json.dumps(reference, sort_keys=True)
    except RecursionError:
        raise _TooDeep("nested too deeply") from None


@dataclass
class ToolReference:
    """A checked reference: the function schemas, the expected calls and the format.

    `expected` None is schema-only mode: any completion whose calls are all valid scores 1.
    """

    tools: list[Any]
    schema: ToolSchema | None
    expected: list[ExpectedCall] | None
    format: ToolFormat
    #: Alternatives of the expected values that break the function's own schema: left out of
    #: the accepted values (BFCL lists such as ``venue: ["", true]``), reported in the result.
    dropped: tuple[str, ...] = ()
    #: "java" / "javascript": arguments are that language's literals as strings (typing_mode.py).
    language: str | None = None


class ToolCallVerifier:
    """Reward 1 when the completion's calls match the expected set; statuses say why not.

    Reference: {"tools": [OpenAI function definitions], "expected": [{"name", "arguments"}],
    "format": "auto"}; a bare list is taken as "expected". `expected: []` means the model
    should not call any tool (reward 1 for no call); no "expected" key at all means schema-only
    mode (reward 1 for one or more calls that all fit "tools"). A reference that cannot be used
    (malformed, or expected values that break their own schema) gives BAD_REFERENCE, unjudged.
    Matching follows BFCL's rules by default (`string_match="bfcl"`; only "" lets a parameter be
    left out); `schema_defaults=True` lets a parameter's schema default stand in for it (left out
    where the default is expected, or sent where the expected call does not name it: the same
    call in effect).
    """

    kind = "tools"
    #: `verify` is the whole check, pure and in this process: the CLI may run it per line in
    #: its own workers (verifiers/cli/raw_line_workers.py) under `timeout`.
    checks_in_process = True

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
        schema_defaults: bool = False,
        integer_floats: bool = False,
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
        self.schema_defaults = bool(schema_defaults)
        self.integer_floats = bool(integer_floats)
        self.workers = default_workers() if workers is None else workers
        self.partial_credit = bool(partial_credit)
        self.think_tag = think_tag
        self.max_depth = max_depth
        self.closed_parameters = closed_parameters
        self.timeout = timeout
        self.max_reported = max_reported
        self._runner: BatchRunner | None = BatchRunner(self._verify_item, self.workers, timeout)
        self._checked: dict[str, ToolReference | str] = {}  # reference JSON -> reference or error
        self._checked_lock = threading.Lock()

    # the runner (live processes) and the cache stay behind when the verifier is sent elsewhere
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_runner"] = None
        state["_checked"] = {}
        del state["_checked_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._checked_lock = threading.Lock()

    def reference_from_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """{"tools", "expected", "format", "language"} from a JSONL line; no "expected":
        schema-only mode; "language" ("java" / "javascript") only when the line has one.

        KeyError when the line has neither "expected" nor "tools".
        """
        if "expected" not in record and not record.get("tools"):
            raise KeyError("expected")
        reference = {
            "tools": record.get("tools") or [],
            "format": record.get("format") or self.format.value,
        }
        if "expected" in record:
            reference["expected"] = record["expected"]
        if record.get("language") is not None:  # the CLI, TRL and verl read the typing mode too
            reference["language"] = record["language"]
        return reference

    def check_reference(self, reference: Any) -> ToolReference:
        """Validate and compile a reference (cached); ValueError says what is wrong with it."""
        if isinstance(reference, ToolReference):
            return reference
        try:
            key = reference_key(reference)
        except _TooDeep as err:
            raise ValueError(f"a tools reference must be JSON data: {err}") from None
        except (TypeError, ValueError):
            return self._read_reference(reference)  # not JSON: read it (and say why it fails)
        return self._from_key(key, reference)

    def _from_key(self, key: str, reference: Any = None) -> ToolReference:
        """The checked reference for its JSON text, read once per process and kept."""
        found = self._checked.get(key)
        if found is None:
            try:
                found = self._read_reference(json.loads(key) if reference is None else reference)
            except ValueError as err:
                found = str(err)
            with self._checked_lock:
                if len(self._checked) >= _REFERENCE_CACHE:
                    self._checked.pop(next(iter(self._checked)))
                self._checked[key] = found
        if isinstance(found, str):
            raise ValueError(found)
        return found

    def _read_reference(self, reference: Any) -> ToolReference:
        """A reference's checked form; ValueError says why it is unusable."""
        try:
            return self._read_json_reference(reference)
        except RecursionError:  # schemas or values nested near the interpreter's limit
            raise ValueError("a tools reference nested too deeply to read") from None

    def _read_json_reference(self, reference: Any) -> ToolReference:
        if isinstance(reference, list):
            reference = {"expected": reference}
        if not isinstance(reference, Mapping) or not ("expected" in reference or reference.get("tools")):
            raise ValueError(
                'a tools reference is {"tools": [...], "expected": [...], "format": ...} '
                '(leave out "expected" for schema-only mode, which needs "tools")'
            )
        tools = reference.get("tools") or []
        schema = ToolSchema.from_tools(tools, closed=self.closed_parameters) if tools else None
        fmt = resolve_format(reference.get("format") or self.format)
        language = check_language(reference.get("language"))
        if "expected" not in reference:
            return ToolReference(list(tools), schema, None, fmt, language=language)
        expected_raw = reference["expected"]
        if not isinstance(expected_raw, list):
            raise ValueError(
                f'"expected" must be a list of calls, got {type(expected_raw).__name__} '
                '(leave it out for schema-only mode)'
            )
        expected = [
            # typed languages: every list is alternatives (collections are code strings)
            expected_call(item, schema.get(_name_of(item))
                          if schema is not None and language is None else None)
            for item in expected_raw
        ]
        if schema is not None:
            unknown = [e.name for e in expected if schema.get(e.name) is None]
            if unknown:
                raise ValueError(f"expected calls use functions missing from tools: {unknown}")
            if language is not None:
                for call in expected:
                    properties = schema.get(call.name).properties
                    for param, arg in call.arguments.items():
                        arg.allowed = [typed_value(v, properties.get(param)) for v in arg.allowed]
            dropped = [note for call in expected
                       for note in _check_against_schema(call, schema, language)]
            return ToolReference(list(tools), schema, expected, fmt, tuple(dropped), language)
        return ToolReference(list(tools), schema, expected, fmt, language=language)

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Verify one completion in this process; an unusable reference gives BAD_REFERENCE."""
        try:
            ref = self.check_reference(reference)
        except ValueError as err:
            return bad_reference(str(err))
        try:
            return self._judge(completion, ref)
        except Exception as err:  # noqa: BLE001 - a bug of ours must not look like a model error
            return VerifyResult(
                0.0, False, Status.INTERNAL_ERROR, f"{type(err).__name__}: {err}"[:300]
            )

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """Verify many completions in worker processes, each under the per-item time limit.

        References travel as JSON text, each distinct one once per chunk of items; the workers
        read (and cache) them, so the caller's process only serialises.
        """
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        results: list[VerifyResult | None] = [None] * len(completions)
        keys: list[str] = []
        index_of: dict[str, int] = {}
        items: list[tuple[str, int]] = []
        positions: list[int] = []
        previous: Any = object()
        for pos, (completion, reference) in enumerate(zip(completions, references, strict=True)):
            if reference is not previous:  # a group of samples often shares one reference object
                previous = reference
                try:
                    key = reference_key(reference)
                except (TypeError, ValueError) as err:
                    key = None
                    detail = f"a tools reference must be JSON data: {err}"
            if key is None:
                results[pos] = bad_reference(detail)
                continue
            if key not in index_of:
                index_of[key] = len(keys)
                keys.append(key)
            items.append((completion, index_of[key]))
            positions.append(pos)
        if items:
            if self._runner is None:
                self._runner = BatchRunner(self._verify_item, self.workers, self.timeout)
            for pos, result in zip(positions, self._runner.run(items, keys), strict=True):
                results[pos] = as_verify_result(result)
        return [r for r in results if r is not None]

    def close(self) -> None:
        """Stop the batch worker processes."""
        if self._runner is not None:
            self._runner.close()

    def __enter__(self) -> ToolCallVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _verify_item(self, completion: str, key: str) -> VerifyResult:
        try:
            ref = self._from_key(key)
        except ValueError as err:
            return bad_reference(str(err))
        return self.verify(completion, ref)

    def _judge(self, completion: str, ref: ToolReference) -> VerifyResult:
        start = time.perf_counter()
        expected = ref.expected or []
        limit = max(self.max_calls, len(expected))
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
        if ref.dropped:
            extra["dropped_alternatives"] = list(ref.dropped[: max(self.max_reported, 1)])
        calls = parsed.calls
        if not calls and not parsed.errors:
            timings = {"parse_s": parsed_at - start}
            if ref.expected is not None and not ref.expected:
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

        calls = [_drop_empty_omissions(_typed_call(call, ref), ref) for call in calls]
        with pattern_budget():
            issues = [self._schema_issues(call, ref) for call in calls]
        reported = [
            {"call": i, **issue.to_dict()} for i, found in enumerate(issues) for issue in found
        ]
        if reported:
            extra["schema_issues"] = reported[: max(self.max_reported, 1)]
        if ref.expected is None:  # schema-only: every call must be valid, none is compared
            match = None
            extra["valid_calls"] = sum(not found for found in issues)
            status, detail = Status.CORRECT, ""  # unless a parse error or a schema issue below
        else:
            match = match_calls(
                calls,
                ref.expected,
                ref.schema,
                self.string_match,
                eligible=[not found for found in issues],
                defaults=self.schema_defaults,
            )
            extra["matched"] = match.matched
            status, detail = match.status, match.detail

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
        correct = status is Status.CORRECT
        if correct:
            reward = 1.0
        elif self.partial_credit:
            # unreadable candidates count as calls that matched nothing
            good = match.matched if match is not None else extra["valid_calls"]
            denominator = max(parsed.n_candidates, len(expected))
            reward = good / denominator if denominator else 0.0
        else:
            reward = 0.0
        timings = {"parse_s": parsed_at - start, "check_s": time.perf_counter() - parsed_at}
        return VerifyResult(reward, correct, status, detail, timings=timings, extra=extra)

    def _schema_issues(self, call: ToolCall, ref: ToolReference) -> list[SchemaIssue]:
        """How `call` breaks its function's definition (2.0 for an integer too, unless
        `integer_floats`)."""
        if ref.schema is None:
            return []
        checked = _checked_call(call, ref)
        found = ref.schema.validate(checked)
        spec = None if self.integer_floats else ref.schema.get(call.name)
        if spec is not None and not found:
            found = float_integers(spec, checked.arguments)
        return found

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


def bad_reference(detail: str) -> VerifyResult:
    """The result for a reference that cannot be used: unjudged, never a wrong answer."""
    return VerifyResult(0.0, False, Status.BAD_REFERENCE, detail[:500])


def _admits_string(prop_schema: Any) -> bool:
    if not isinstance(prop_schema, Mapping):
        return False
    kind = prop_schema.get("type")
    return kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)


def _drop_empty_omissions(call: ToolCall, ref: ToolReference) -> ToolCall:
    """Read an explicit "" as "left out" where an expected call may omit that string parameter.

    BFCL's marker "" means "may be omitted or empty"; the schema's enum need not list "".
    A required parameter keeps its "" (and the schema judges it).
    """
    if not ref.expected or not any(v == OMIT for v in call.arguments.values() if isinstance(v, str)):
        return call
    spec = ref.schema.get(call.name) if ref.schema is not None else None
    props = spec.properties if spec is not None else {}
    required = spec.required if spec is not None else frozenset()
    omittable = {
        param
        for exp in ref.expected
        if exp.name == call.name
        for param, arg in exp.arguments.items()
        if arg.may_omit and param in props and param not in required and _admits_string(props[param])
    }
    dropped = {k: v for k, v in call.arguments.items() if not (k in omittable and v == OMIT)}
    return call if len(dropped) == len(call.arguments) else ToolCall(call.name, dropped)


def _concrete(value: Any) -> bool:
    if isinstance(value, ObjectPattern):
        return False
    if isinstance(value, list):
        return all(_concrete(v) for v in value)
    return True


def _typed_call(call: ToolCall, ref: ToolReference) -> ToolCall:
    """The call with language-typed argument strings read as values (java/javascript refs)."""
    spec = ref.schema.get(call.name) if ref.language and ref.schema is not None else None
    if spec is None:
        return call
    return ToolCall(call.name, typed_arguments(call.arguments, spec.properties))


def _checked_call(call: ToolCall, ref: ToolReference) -> ToolCall:
    """The call as the schema check sees it: collection code passes in a typed language."""
    spec = ref.schema.get(call.name) if ref.language and ref.schema is not None else None
    if spec is None:
        return call
    return ToolCall(call.name, checked_arguments(call.arguments, spec.properties))


def _check_against_schema(call: ExpectedCall, schema: ToolSchema,
                          language: str | None = None) -> list[str]:
    """Drop the allowed values of an expected call that break its own schema (no call with
    one could be accepted) and say which; ValueError when an argument is left with no allowed
    value and may not be omitted, or the call can never match for another reason."""
    spec = schema.get(call.name)
    if spec is None:
        return []
    dropped: list[str] = []
    for param, arg in call.arguments.items():
        if spec.closed_to_unlisted and param not in spec.properties and not arg.may_omit:
            raise ValueError(f"expected {call.name}({param}=...): {param!r} is not a parameter of {call.name}")
        if param not in spec.properties:
            continue
        kept, first = [], None
        for value in arg.allowed:
            shown = placeholder(value, spec.properties.get(param)) if language else value
            found = validate_parameter(spec, param, shown) if _concrete(value) else []
            if found:  # nested allowed values are judged key by key when matched
                first = first or found[0].message
                dropped.append(f"{call.name}({param}={value!r:.60}): {found[0].message}")
            else:
                kept.append(value)
        if not kept and (not arg.may_omit or param in spec.required):
            why = (f"every allowed value breaks the function's own schema ({first})" if first else
                   'its only allowed value is "" (left out), but it is required')
            raise ValueError(f"expected {call.name}({param}=...): {why}; a call could never be accepted")
        arg.allowed = kept
    missing = sorted(spec.required - set(call.arguments))
    if missing:
        raise ValueError(f"expected {call.name} call lacks required parameter(s) {missing}; it could never match")
    return dropped

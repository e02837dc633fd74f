"""`veristep serve KIND...`: the command line of the reward server (heavy imports load on use)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from veristep.common.jsonl_io import UsageError, require_module

PROG = "veristep serve"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `serve` sub-command."""
    parser = subparsers.add_parser(
        "serve",
        help="serve verifier kinds over HTTP (native rows, OpenRLHF /get_reward, slime)",
        description=(
            "Serve one or more verifier kinds over HTTP. Endpoints: POST /v1/verify[/KIND] "
            "(rows in the `veristep verify` JSONL format, answered with the same output rows), "
            "POST /get_reward (OpenRLHF), POST /slime (slime's {prompt, response, label}), "
            "GET /health, /ready, /metrics (Prometheus). The first KIND serves the endpoints "
            "without a kind in their path. Binds to loopback unless --host says otherwise; any "
            "other address needs a bearer token (--token or VERISTEP_SERVE_TOKEN). Stop with "
            "SIGTERM or Ctrl-C: accepted requests are answered first. Docs: docs/serve.md."
        ),
    )
    parser.add_argument("kinds", metavar="KIND", nargs="+")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed)")
    parser.add_argument("--token", default=None,
                        help="bearer token every request but /health and /ready must carry "
                        "(default: $VERISTEP_SERVE_TOKEN)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (or sandbox threads) per kind and server process "
                        "(default: the verifier's own)")
    parser.add_argument("--processes", type=int, default=1,
                        help="server processes sharing the port (SO_REUSEPORT), each with its own pools")
    parser.add_argument("--max-queue", type=int, default=4096,
                        help="items accepted and not yet answered per process; beyond it: 429 + Retry-After")
    parser.add_argument("--max-connections", type=int, default=1024,
                        help="open connections per process; beyond it uvicorn answers 503 (bounds "
                        "the memory of bodies being read: this times --max-body-mb)")
    parser.add_argument("--deadline", type=float, default=120.0,
                        help="seconds a request may take; items without a verdict by then are "
                        "answered `timeout` (a request may ask for less: X-Veristep-Deadline)")
    parser.add_argument("--max-body-mb", type=float, default=32.0, help="largest request body")
    parser.add_argument("--header-timeout", type=float, default=10.0,
                        help="seconds a connection has to send a request's head, else it is "
                        "closed; a body gets that plus 1 s per MB of --max-body-mb, else 408 (a "
                        "half-sent request holds one of --max-connections)")
    parser.add_argument("--unjudged-reward", default="0.0",
                        help="the reward OpenRLHF and slime get for an unjudged item (a finite "
                        "number or 'null'); its status travels beside it either way")
    parser.add_argument("--lanes", type=int, default=4,
                        help="threads per kind that hand batched requests to its pool")
    parser.add_argument("--nice", action="append", metavar="[KIND=]N",
                        help="run a kind's work (its lanes, pool workers, sandboxed programs) N "
                        "nice levels below the server's CPU priority, 0-19, repeatable; a bare N "
                        "sets every kind (Linux, local pools; default 0: e.g. --nice code=10 lets "
                        "cheap kinds and the HTTP handling go first when the CPU is short, for "
                        "less code throughput and less CPU within its tests' wall-clock limits)")
    parser.add_argument("--completion-key", default="completion",
                        help="row key holding the completion (native endpoint)")
    parser.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS",
                        help="compute verdicts on Ray actors spread over a Ray cluster's nodes, "
                        "each holding every kind's pool (--workers each), behind this one HTTP "
                        "front: 'auto' (default: the cluster this machine joined, or "
                        "$RAY_ADDRESS), 'local' (a private one-machine instance), HOST:PORT or "
                        "ray://HOST:PORT")
    parser.add_argument("--ray-actors", type=int, default=None,
                        help="Ray actors (default: one per alive node)")
    parser.add_argument("--ray-cpus", type=float, default=1.0,
                        help="CPUs each Ray actor reserves in Ray's accounting (placement only; "
                        "its pool uses --workers processes)")
    parser.add_argument("--ray-ready-timeout", type=float, default=600.0,
                        help="seconds for every Ray actor to build its verifiers and warm its "
                        "pools; past it the server exits non-zero saying why (e.g. actors that cannot be placed)")
    parser.add_argument("--set", dest="config", action="append", metavar="[KIND.]KEY=VALUE",
                        help="verifier option, repeatable; KIND. limits it to one kind; VALUE is "
                        "JSON if it parses (--set math.timeout=3)")
    parser.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> Any:
    """The checked ServeConfig of the command line (UsageError on any mistake)."""
    from veristep.verifiers.cli.verify import check_config, parse_config
    from veristep.verifiers.core.registry import verifier_class

    from .service import ServeConfig, unjudged_reward_of

    kinds = list(dict.fromkeys(args.kinds))
    configs: dict[str, dict[str, Any]] = {k: {} for k in kinds}
    for pair in args.config or []:
        key, sep, value = pair.partition("=")
        kind, dot, name = key.rpartition(".")
        if dot and kind not in configs:
            raise UsageError(f"--set {pair!r}: {kind!r} is not one of the served kinds ({', '.join(kinds)})")
        parsed = parse_config([f"{name}{sep}{value}"])
        for target in ([kind] if dot else kinds):
            configs[target].update(parsed)
    for kind in kinds:
        if args.workers is not None:
            configs[kind].setdefault("workers", args.workers)
        try:
            cls = verifier_class(kind)
        except ValueError as err:
            raise UsageError(str(err)) from None
        check_config(cls, configs[kind])
    for name, value, low in (("--workers", args.workers, 1), ("--processes", args.processes, 1),
                             ("--max-queue", args.max_queue, 1), ("--lanes", args.lanes, 1),
                             ("--max-connections", args.max_connections, 1)):
        if value is not None and value < low:
            raise UsageError(f"{name} must be >= {low}, got {value}")
    if args.ray_actors is not None and args.ray_actors < 1:
        raise UsageError(f"--ray-actors must be >= 1, got {args.ray_actors}")
    if not args.ray_cpus >= 0:
        raise UsageError(f"--ray-cpus must be >= 0, got {args.ray_cpus}")
    if not args.ray_ready_timeout > 0:
        raise UsageError(f"--ray-ready-timeout must be > 0, got {args.ray_ready_timeout}")
    if args.ray is None and (args.ray_actors is not None or args.ray_cpus != 1.0
                             or args.ray_ready_timeout != 600.0):
        raise UsageError("--ray-actors, --ray-cpus and --ray-ready-timeout need --ray")
    if args.ray is not None and args.processes > 1:
        raise UsageError("--ray and --processes > 1 do not combine: with --ray one front process "
                         "hands the work to the actors (run another front elsewhere for more)")
    if not args.deadline > 0 or not args.max_body_mb > 0 or not args.header_timeout > 0:
        raise UsageError("--deadline, --max-body-mb and --header-timeout must be > 0")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {args.port}")
    if args.processes > 1 and args.port == 0:
        raise UsageError("--processes > 1 needs a fixed --port (each process binds it)")
    try:
        unjudged = unjudged_reward_of(json.loads(args.unjudged_reward))
    except ValueError:  # not JSON, not a number, NaN or infinite
        raise UsageError("--unjudged-reward must be a finite number or null, "
                         f"got {args.unjudged_reward!r}") from None
    nice = parse_nice(args.nice or [], kinds)
    token = server_token(args.token, os.environ.get("VERISTEP_SERVE_TOKEN"))
    from .main import is_loopback

    if not is_loopback(args.host) and not token:
        raise UsageError(f"binding to {args.host} exposes the server beyond this machine: give a "
                         "bearer token (--token or VERISTEP_SERVE_TOKEN)")
    return ServeConfig(
        kinds=kinds, configs=configs, host=args.host, port=args.port, token=token,
        max_queue=args.max_queue, deadline_s=args.deadline,
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        unjudged_reward=unjudged, header_timeout_s=args.header_timeout,
        completion_key=args.completion_key, lanes=args.lanes, processes=args.processes,
        max_connections=args.max_connections, ray_address=args.ray,
        ray_actors=args.ray_actors, ray_cpus=args.ray_cpus,
        ray_ready_timeout_s=args.ray_ready_timeout, nice=nice,
    )


def server_token(flag: str | None, env: str | None) -> str | None:
    """The bearer token: --token, else the environment's (empty: none); UsageError if blank.

    Surrounding whitespace is dropped: HTTP strips it from a header value, so a token that
    kept it could never be matched. A token of whitespace only would guard nothing.
    """
    for name, value in (("--token", flag), ("VERISTEP_SERVE_TOKEN", env)):
        if value is None or (value == "" and name != "--token"):
            continue
        if not value.strip():
            raise UsageError(f"{name} is blank: give a bearer token of visible characters")
        return value.strip()
    return None


def parse_nice(values: list[str], kinds: list[str]) -> dict[str, int]:
    """`--nice` values ("N" for every kind, "KIND=N" for one; later ones win) as {kind: N}."""
    out: dict[str, int] = {}
    for value in values:
        kind, sep, number = value.rpartition("=")
        if sep and kind not in kinds:
            raise UsageError(f"--nice {value!r}: {kind!r} is not one of the served kinds ({', '.join(kinds)})")
        try:
            n = int(number)
        except ValueError:
            n = -1
        if not 0 <= n <= 19:
            raise UsageError(f"--nice {value!r}: N must be an integer from 0 to 19")
        for target in ([kind] if sep else kinds):
            out[target] = n
    return out


def run(args: argparse.Namespace) -> int:
    """Check the command line, then serve until SIGTERM / Ctrl-C."""
    for module in ("starlette", "uvicorn", "prometheus_client"):
        require_module(module, "serve", PROG)
    config = build_config(args)
    from .main import serve
    from .service import Service

    try:
        service = Service(config)  # a bad option fails here, before the port is taken
    except (ValueError, TypeError) as err:
        raise UsageError(f"bad verifier configuration: {err}") from None
    if config.processes > 1:  # each server process builds its own after the fork
        service.close()
        service = None
    try:
        return serve(config, service)
    except OSError as err:  # the port is taken, the address is not ours ...
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {err.strerror or err}") from None

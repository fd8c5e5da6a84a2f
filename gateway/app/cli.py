"""``thinkgate serve | sim | demo``: parse arguments, build settings, run hypercorn. No logic."""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from importlib import metadata

from gateway.app import keys_cli
from gateway.app.settings import Settings, SettingsError

SIM_TRY = "thinkgate sim --port 8090 --tools 1 & GATEWAY_ANTHROPIC_BASE_URL=http://127.0.0.1:8090 thinkgate serve"


def version() -> str:
    """The installed package's version (its metadata: pyproject.toml's ``version``)."""
    try:
        return metadata.version("thinkgate")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
        return "unknown"


def settings_epilog() -> str:
    """Every ``GATEWAY_*`` setting with its default and meaning, from ``Settings`` itself."""
    rows = Settings.reference()
    width = max(len(name) for name, _, _ in rows)
    lines = ["settings (environment variables; README \"Configuration\" says more):"]
    for name, default, meaning in rows:
        lines.append(f"  {name:<{width}}  {meaning} [default: {default}]")
    lines += ["", "also read (README \"Configuration\" and \"Tracing\"):",
              "  PROMETHEUS_MULTIPROC_DIR  the workers' shared metrics directory (--workers > 1: a temporary one "
              "when unset)",
              "  OTEL_*                    OpenTelemetry traces with the otel extra: OTEL_EXPORTER_OTLP_ENDPOINT, "
              "OTEL_TRACES_EXPORTER, OTEL_SDK_DISABLED..."]
    return "\n".join(lines)


def markers_epilog() -> str:
    from thinkgate_sim.scenarios import MARKERS

    width = max(len(m) for m, _ in MARKERS)
    lines = ["scenario markers (anywhere in the FIRST user message of a conversation; any combination):"]
    lines += [f"  {marker:<{width}}  {meaning}" for marker, meaning in MARKERS]
    lines += ["", "upstream paths: Anthropic /v1/messages; Gemini /v1beta/models/... (AI Studio) and "
                  "/vertex/v1beta/models/...;",
              "  OpenAI-compatible /openrouter/api/v1, /copilot, /deepseek/v1, /v1beta/openai "
              "(+ /chat/completions)",
              "control: GET /_sim/stats, GET /_sim/last, POST /_sim/reset, POST /_sim/release",
              "", f"try it: {SIM_TRY}"]
    return "\n".join(lines)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option's help (not for switches and unset options); the description and epilog
    (settings, markers) as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


def _wrap(text: str) -> str:
    return textwrap.fill(text, 100)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        settings.check_production()
        settings.upstream_auths()  # (a cloud route whose extra is missing: one line, before any worker starts)
        if settings.redis_url:
            _check_store_credentials(settings.redis_url)
        if args.workers > 1 and settings.state_machine_enabled and not settings.redis_url:
            # as the chart refuses replicas without a shared store
            raise SettingsError(
                f"--workers {args.workers} without GATEWAY_REDIS_URL: each worker would keep its own embedded store, "
                "and a conversation whose requests reach different workers loses its recorded thinking there; set "
                "GATEWAY_REDIS_URL (or GATEWAY_STATE_MACHINE_ENABLED=false for a stateless gateway)")
        _check_listen(args.host, args.port)
    except SettingsError as e:
        print(f"thinkgate: {e}", file=sys.stderr)
        return 2
    from gateway.dialects.urls import display_url
    from gateway.ops import metrics_workers, telemetry
    from state.factory import describe_store

    telemetry.configure(settings.log_level, settings.log_format)
    store = describe_store(settings.redis_url) if settings.state_machine_enabled else "off"
    upstreams = ", ".join(f"{name}={display_url(url)}" for name, url in settings.upstream_urls().items())
    log = logging.getLogger("thinkgate")
    log.info("starting thinkgate %s on http://%s:%s (%d worker(s)); store: %s; upstreams: %s", version(),
             args.host, args.port, args.workers, store, upstreams)
    log.debug("settings: %r", settings)  # every setting (secrets left out by its repr): GATEWAY_LOG_LEVEL=DEBUG
    from gateway.app.server import serve_gateway

    with metrics_workers.multiprocess_dir(args.workers):  # before the workers spawn; removed after
        serve_gateway(host=args.host, port=args.port, workers=args.workers,
                      keep_alive_s=settings.keep_alive_timeout_s)
    return 0


def _check_listen(host: str, port: int) -> None:
    """A port another process holds, or one this user may not bind, stops the start (one line, exit 2) as any bad
    setting does, instead of the server's traceback."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise SettingsError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _check_store_credentials(url: str) -> None:
    """A wrong Redis password stops the start (one line, exit 2); an unreachable Redis does not (the
    gateway serves statelessly until it is back)."""
    import asyncio

    from state.probe import check_credentials

    try:
        asyncio.run(check_credentials(url))
    except ValueError as e:
        raise SettingsError(f"GATEWAY_REDIS_URL: {e}") from None


def cmd_sim(args: argparse.Namespace) -> int:
    from gateway.ops import telemetry
    from thinkgate_sim.app import SimConfig, run_sim

    config = SimConfig(strict_older_turns=not args.lenient_older_turns,
                       interleaved={"auto": None, "on": True, "off": False}[args.interleaved])
    config.binding_enforced = not args.binding_not_enforced
    config.tools = max(0, args.tools)
    if args.bound_models is not None:
        config.bound_models = tuple(m.strip() for m in args.bound_models.split(",") if m.strip())
    telemetry.configure("WARNING", "text")
    logging.getLogger("hypercorn.error").setLevel(logging.INFO)  # its one "Running on" line per listener
    run_sim(args.host, args.port, config)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.app.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thinkgate", description="LLM API gateway that keeps thinking valid",
                                formatter_class=_Formatter)
    p.add_argument("--version", action="version", version=f"thinkgate {version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{serve,sim,demo,keys}",
                           help="`thinkgate COMMAND --help` says more")
    s = sub.add_parser("serve", help="run the gateway", formatter_class=_Formatter, epilog=settings_epilog(),
                       description=_wrap("Run the gateway (hypercorn). Configured by the GATEWAY_* environment "
                                   "variables below."))
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    s.add_argument("--port", type=int, default=8080, help="port to listen on")
    s.add_argument("--workers", type=int, default=1,
                   help="worker processes (each listens on its own SO_REUSEPORT socket); more than one needs "
                        "GATEWAY_REDIS_URL so that they share conversation state")
    s.set_defaults(func=cmd_serve)
    m = sub.add_parser("sim", help="run the strict upstream simulator", formatter_class=_Formatter,
                       epilog=markers_epilog(),
                       description=_wrap("A strict stand-in for every upstream family thinkgate calls: it rejects what "
                                   "the real APIs reject, with their error texts, and answers with scripted "
                                   "thinking, signatures and tool calls. No API key is checked beyond its presence. "
                                   "Paths: Anthropic /v1/messages (and count_tokens); Gemini /v1beta/models/... and "
                                   "/vertex/v1beta/models/...; OpenAI-compatible chat/completions under "
                                   "/v1beta/openai, /openrouter/api/v1, /copilot and /deepseek/v1; OpenAI Responses "
                                   "/openai/v1/responses; a model list on each (GET /v1/models, /v1beta/models, "
                                   "/openai/v1/models, .../models)."))
    m.add_argument("--host", default="127.0.0.1", help="address to listen on")
    m.add_argument("--port", type=int, default=8090, help="port to listen on")
    m.add_argument("--tools", type=int, default=0, metavar="N",
                   help="tool rounds for every conversation that declares tools and has no [[sim:tools=N]] "
                        "marker (then a final text answer)")
    m.add_argument("--lenient-older-turns", action="store_true",
                   help="check signatures only in the latest assistant message")
    m.add_argument("--interleaved", choices=("auto", "on", "off"), default="auto",
                   help="interleaved thinking between tool calls: auto follows the beta header / adaptive "
                        "thinking")
    m.add_argument("--bound-models", metavar="MODEL,...", default=None,
                   help="models whose thinking blocks are bound to their prefix and model (comma-separated; "
                        "'' for none; default: the Claude 5.x models of the preserved-thinking docs)")
    m.add_argument("--binding-not-enforced", action="store_true",
                   help="an account older than 2026-08-31: prefix mismatches are acted on only when the request "
                        "sets thinking.block_binding.prefix_mismatch_behavior")
    m.set_defaults(func=cmd_sim)
    d = sub.add_parser("demo", help="before/after demo of a mangling client, simulator and gateway in-process",
                       formatter_class=_Formatter,
                       description=_wrap("Start the simulator and the gateway in this process on loopback ports, run a "
                                   "Cursor-like client that strips signatures and trims thinking, directly and "
                                   "through thinkgate, and print the difference. Needs nothing else."))
    d.set_defaults(func=cmd_demo)
    keys_cli.add_parser(sub, _Formatter)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

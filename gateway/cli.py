"""``thinkgate serve | sim | demo``: parse arguments, build settings, run hypercorn. No logic."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.settings import Settings, SettingsError


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        settings.check_production()
        if settings.redis_url:
            _check_store_credentials(settings.redis_url)
    except SettingsError as e:
        print(f"thinkgate: {e}", file=sys.stderr)
        return 2
    from gateway import logs, metrics

    logs.configure(settings.log_level, settings.log_format)
    logging.getLogger("thinkgate").info("starting thinkgate on %s:%s (%d worker(s)); %r",
                                        args.host, args.port, args.workers, settings)
    from gateway.server import serve_gateway

    with metrics.multiprocess_dir(args.workers):  # before the workers spawn; removed after
        serve_gateway(host=args.host, port=args.port, workers=args.workers,
                      keep_alive_s=settings.keep_alive_timeout_s)
    return 0


def _check_store_credentials(url: str) -> None:
    """A wrong Redis password stops the start (one line, exit 2); an unreachable Redis does not (issue 22)."""
    import asyncio

    from state.probe import check_credentials

    try:
        asyncio.run(check_credentials(url))
    except ValueError as e:
        raise SettingsError(f"GATEWAY_REDIS_URL: {e}") from None


def cmd_sim(args: argparse.Namespace) -> int:
    from gateway.sim.app import SimConfig, run_sim

    config = SimConfig(strict_older_turns=not args.lenient_older_turns,
                       interleaved={"auto": None, "on": True, "off": False}[args.interleaved])
    config.binding_enforced = not args.binding_not_enforced
    if args.bound_models is not None:
        config.bound_models = tuple(m.strip() for m in args.bound_models.split(",") if m.strip())
    logging.basicConfig(level=logging.WARNING)
    run_sim(args.host, args.port, config)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thinkgate", description="LLM API gateway that keeps thinking valid")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--workers", type=int, default=1)
    s.set_defaults(func=cmd_serve)
    m = sub.add_parser("sim", help="run the strict upstream simulator")
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, default=8090)
    m.add_argument("--lenient-older-turns", action="store_true",
                   help="check signatures only in the latest assistant message")
    m.add_argument("--interleaved", choices=("auto", "on", "off"), default="auto")
    m.add_argument("--bound-models", metavar="MODEL,...", default=None,
                   help="models whose thinking blocks are bound to their prefix and model (comma-separated; "
                        "'' for none; default: the Claude 5.x models of the preserved-thinking docs)")
    m.add_argument("--binding-not-enforced", action="store_true",
                   help="an account older than 2026-08-31: prefix mismatches are acted on only when the request "
                        "sets thinking.block_binding.prefix_mismatch_behavior")
    m.set_defaults(func=cmd_sim)
    d = sub.add_parser("demo", help="before/after demo of a mangling client, simulator and gateway in-process")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

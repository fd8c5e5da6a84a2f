"""``thinkgate keys create|list|update|revoke``: the admin API's operations on the store the gateway uses
(``GATEWAY_REDIS_URL``, as ``serve`` reads it), printed as JSON. The key itself is printed once, by ``create``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import orjson

from gateway.access import admin
from gateway.app.settings import Settings, SettingsError
from gateway.errors import GatewayError
from state.factory import open_store


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    k = sub.add_parser("keys", help="create, list, update and revoke gateway keys", formatter_class=formatter,
                       description="Gateway keys in the store GATEWAY_REDIS_URL names (the one the replicas share).")
    ops = k.add_subparsers(dest="op", required=True, metavar="{create,list,update,revoke}")
    for name in ("create", "update"):
        o = ops.add_parser(name, help=f"{name} a key")
        o.add_argument("--name", required=True, help="the key's name (a person, a team, a service)")
        o.add_argument("--models", help="comma-separated model patterns it may use ('claude-*,gemini-*'; default all)")
        o.add_argument("--rpm", type=int, help="requests per minute (0: no limit)")
        o.add_argument("--tpm", type=int, help="tokens per minute, input and output (0: no limit)")
        o.add_argument("--concurrency", type=int, help="requests in flight (0: no limit)")
        o.add_argument("--budget-usd", help="spend budget per UTC day, week or month, e.g. 50/month (0: none)")
        o.add_argument("--expires-in-days", type=int, help="days until it expires (0: never)")
    ops.add_parser("list", help="every key (never the keys themselves)")
    r = ops.add_parser("revoke", help="revoke a key: refused by every replica from its next request")
    r.add_argument("--name", required=True)
    k.set_defaults(func=cmd_keys)
    u = sub.add_parser("usage", help="tokens and spend per gateway key, day and model", formatter_class=formatter,
                       description="Usage of the gateway keys in the store GATEWAY_REDIS_URL names, by UTC day and "
                                   "model: tokens by kind and what they cost (the price table).")
    u.add_argument("--days", type=int, default=7, help="the last N days, today included (1-31)")
    u.add_argument("--name", help="one key (default: every key)")
    u.set_defaults(func=cmd_keys, op="usage")


def cmd_keys(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as e:
        print(f"thinkgate {args.command}: {e}", file=sys.stderr)
        return 2
    if not settings.redis_url:
        print(f"thinkgate {args.command}: GATEWAY_REDIS_URL is not set (gateway keys live in the store the replicas "
              "share)", file=sys.stderr)
        return 2
    try:
        out = asyncio.run(_run(args, settings.redis_url))
    except GatewayError as e:
        print(f"thinkgate {args.command}: {e.message}", file=sys.stderr)
        return 1
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
    return 0


async def _run(args: argparse.Namespace, url: str) -> Any:
    store = open_store(url)
    await store.start()
    try:
        limits = {k: v for k in admin.LIMITS if (v := getattr(args, k, None)) is not None}
        if args.op == "create":
            return await admin.create(store, {"name": args.name, **limits})
        if args.op == "update":
            return await admin.update(store, args.name, limits)
        if args.op == "revoke":
            return await admin.revoke(store, args.name)
        if args.op == "usage":
            return await admin.usage(store, args.days, args.name)
        return {"keys": await admin.listed(store)}
    finally:
        await store.close()

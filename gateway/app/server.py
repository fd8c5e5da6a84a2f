"""Run an ASGI app under hypercorn (uvloop when available).

The gateway drains on SIGTERM (or SIGINT): readiness goes false at once (``/readyz`` 503) while the
listener stays open, for at least ``GATEWAY_DRAIN_DELAY_S`` and until no client request is in flight
(at most ``GATEWAY_DRAIN_TIMEOUT_S`` in all); then hypercorn closes the listener, gives connections
still busy what is left of that budget, runs the lifespan shutdown and the process exits 0. A second
signal stops the wait (one process). With ``--workers N`` hypercorn's supervisor turns SIGTERM into
its shutdown event, and every worker drains the same way; the supervisor exits once all have.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import multiprocessing
import signal
from collections.abc import Awaitable, Callable
from functools import partial
from multiprocessing.synchronize import Event as EventType
from typing import Any

import hypercorn.asyncio.run as hypercorn_workers
from hypercorn.config import Config, Sockets
from hypercorn.run import run
from hypercorn.utils import check_multiprocess_shutdown_event, wrap_app
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.ops.metrics import INTERNAL_PATHS

log = logging.getLogger("thinkgate")


def _config(host: str, port: int, workers: int, keep_alive_s: float = 75.0) -> Config:
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.worker_class = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    # workers == 1 runs in this process (hypercorn's workers=0); N > 1 spawns N processes.
    config.workers = 0 if workers <= 1 else workers
    # hypercorn's idle timer: between requests on a kept-alive connection, and from the connection's start until
    # its request headers are complete (a slow-loris client that never finishes them is closed then). Longer
    # than a load balancer's own idle timeout (60 s on AWS ALB), so the balancer closes first.
    config.keep_alive_timeout = keep_alive_s
    config.graceful_timeout = 30
    config.accesslog = None
    config.errorlog = "-"
    return config


class Drain:
    """One worker's app, wrapped: counts client requests in flight; ``until_drained`` is hypercorn's
    shutdown trigger (the listener closes when it returns)."""

    def __init__(self, app: Any, config: Config) -> None:
        self.app: ASGIApp = app
        self.gateway = app.state.gateway  # gateway.app.factory.Gateway: its ``draining`` flag drives /readyz
        self.config = config
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in INTERNAL_PATHS:
            await self.app(scope, receive, send)
            return
        self.inflight += 1
        self._idle.clear()
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1
            if self.inflight == 0:
                self._idle.set()

    async def until_drained(self, shutdown_event: EventType | None = None) -> None:
        loop = asyncio.get_running_loop()
        signalled = asyncio.Event()
        waits: list[Callable[[], Awaitable[Any]]] = [signalled.wait]
        if shutdown_event is None:  # alone: this process takes the signals
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, signalled.set)
        else:
            # a spawned worker follows the supervisor's shutdown event; hypercorn SIGTERMs the workers
            # still running as soon as one exits, which must not cut their own drain short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            waits.append(partial(check_multiprocess_shutdown_event, shutdown_event, asyncio.sleep))
        await _first(*waits)
        settings = self.gateway.settings
        self.gateway.draining = True
        started = loop.time()
        log.warning("shutting down: draining (readiness false), %d request(s) in flight, at most %.0f s",
                    self.inflight, settings.drain_timeout_s)
        signalled.clear()  # from now on a second signal ends the wait
        budget = settings.drain_timeout_s
        await _first(signalled.wait, partial(asyncio.sleep, min(settings.drain_delay_s, budget)))
        left = max(budget - (loop.time() - started), 0.0)
        if not signalled.is_set():
            await _first(signalled.wait, self._idle.wait, partial(asyncio.sleep, left))
        left = max(budget - (loop.time() - started), 0.0)
        # hypercorn now closes the listener and waits graceful_timeout for busy connections: the rest
        self.config.graceful_timeout = left if not signalled.is_set() else 0.0
        log.warning("shutting down: closing the listener, %d request(s) in flight", self.inflight)


async def _first(*waits: Callable[[], Awaitable[Any]]) -> None:
    """Wait until the first of ``waits`` returns; cancel the others."""
    tasks = [asyncio.ensure_future(w()) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _worker(config: Config, sockets: Sockets | None = None, shutdown_event: EventType | None = None) -> None:
    """One hypercorn worker (this process, or a spawned one with several), serving ``gateway.app.asgi:app``
    behind ``Drain``. Mirrors hypercorn's own ``asyncio_worker`` / ``uvloop_worker``."""
    from gateway.app.asgi import app

    if shutdown_event is not None and config.workers > 1:
        # One of several workers: listen on a socket of its own (SO_REUSEPORT, same address) instead of
        # accepting from the supervisor's shared one, so the kernel spreads connections evenly; on a
        # shared socket the busiest worker (the one awake in accept) took nearly every keep-alive
        # connection. The supervisor's socket stays bound but never listens, so it gets none.
        sockets = config.create_sockets()
    drain = Drain(app, config)
    loop_factory = None
    if config.worker_class == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(hypercorn_workers.worker_serve(
            wrap_app(drain, config.wsgi_max_body_size, "asgi"), config, sockets=sockets,  # type: ignore[arg-type]
            shutdown_trigger=partial(drain.until_drained, shutdown_event)))


def serve_gateway(host: str, port: int, workers: int = 1, keep_alive_s: float = 75.0) -> None:
    config = _config(host, port, workers, keep_alive_s)
    config.errorlog = logging.getLogger("hypercorn.error")  # through thinkgate's handler (GATEWAY_LOG_FORMAT)
    config.application_path = "gateway.app.asgi:app"
    if workers <= 1:
        _worker(config, config.create_sockets())
        return
    # Several workers: hypercorn's supervisor (SIGTERM/SIGINT -> shutdown event, SIGHUP -> new workers)
    # spawns the worker function of the configured class, looked up in this module when run() starts.
    name = f"{config.worker_class}_worker"
    original = getattr(hypercorn_workers, name)
    setattr(hypercorn_workers, name, _worker)
    try:
        run(config)
    finally:
        setattr(hypercorn_workers, name, original)
    for worker in multiprocessing.active_children():  # run() returns when the first worker is done
        worker.join()


def serve_app_path(application_path: str, host: str, port: int) -> None:
    config = _config(host, port, 1)
    config.application_path = application_path
    run(config)

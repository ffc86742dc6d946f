"""``painted-skin serve | broker | keys``: the backend's command line.

``cli.py`` calls :func:`add_commands` on its subparsers; ``python -m
painted_skin.backend serve ...`` runs the same handlers without the rest of the
CLI (``backend/__main__.py``). Each service prints one line
``painted-skin <what>: listening on <endpoint> ...`` on stdout once it is up.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

import zmq

from .auth import InsecureEndpoint


def _stop_on_signals(stop) -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop())


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _check_keys(keys: str | None, role: str) -> None:
    if keys and not Path(keys, f"{role}.key_secret").exists():
        raise ValueError(f"--keys {keys}: no {role}.key_secret there; run "
                         f"`painted-skin keys {keys}`")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _positive_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 2**40:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of megabytes")
    return value


def _check_limits(args: argparse.Namespace) -> None:
    from ..wire import MAX_MESSAGE_BYTES

    if args.max_message_mb * 2**20 > MAX_MESSAGE_BYTES:
        raise ValueError(f"--max-message-mb {args.max_message_mb:g} is over the protocol's "
                         f"{MAX_MESSAGE_BYTES / 2**20:g}; give at most that")


def _limit_args(p: argparse.ArgumentParser, sessions: int) -> None:
    """The limits a service enforces (shown in --help; docs/protocol.md, Limits)."""
    from ..wire import MAX_MESSAGE_BYTES
    from .quotas import DEFAULT_CLIENT_MB, DEFAULT_CLIENT_SESSIONS

    g = p.add_argument_group("limits (a client over one gets error 'busy' or 'too_big')")
    g.add_argument("--max-sessions", type=_positive_int, default=sessions,
                   help=f"sessions open at once, all clients (default {sessions})")
    g.add_argument("--client-sessions", type=_positive_int, default=DEFAULT_CLIENT_SESSIONS,
                   help="sessions one client may hold; a client is its CurveZMQ key, or its "
                        f"connection without keys (default {DEFAULT_CLIENT_SESSIONS})")
    g.add_argument("--client-mb", type=_positive_mb, default=DEFAULT_CLIENT_MB,
                   help="MB of queued frames and reference images one client may hold "
                        f"(default {DEFAULT_CLIENT_MB:g})")
    g.add_argument("--max-message-mb", type=_positive_mb, default=MAX_MESSAGE_BYTES / 2**20,
                   help="MB of arrays in one message; bigger ones are drained and refused "
                        f"(default {MAX_MESSAGE_BYTES / 2**20:g}, also the most allowed)")


def cmd_serve(args: argparse.Namespace) -> int:
    from . import pipelines
    from .server import ServeConfig, Server

    _logging(args.verbose)
    _check_limits(args)
    pipelines.register_builtin()
    if args.pipeline not in pipelines.REGISTRY:
        raise ValueError(  # cli.py prints ValueErrors without a traceback, exit 2
            f"--pipeline {args.pipeline!r} is unknown; known: {', '.join(pipelines.names())}")
    cfg = ServeConfig(bind=args.bind, connect=args.connect, pipeline=args.pipeline,
                      device=args.device, credits=args.credits,
                      session_timeout=args.session_timeout, keys=args.keys,
                      cache_mb=args.cache_mb, shm=not args.no_shm,
                      max_sessions=args.max_sessions, client_sessions=args.client_sessions,
                      client_mb=args.client_mb, max_message_mb=args.max_message_mb)
    _check_keys(args.keys, "workers/worker" if args.connect else "server")
    server = Server(cfg)
    try:
        if args.connect:
            server.connect(args.connect)
            print(f"painted-skin serve: worker of {args.connect} ({args.pipeline} on "
                  f"{args.device})", flush=True)
        else:
            endpoint = server.bind(args.bind)
            print(f"painted-skin serve: listening on {endpoint} ({args.pipeline} on "
                  f"{args.device}{', curve' if args.keys else ''})", flush=True)
    except zmq.ZMQError as e:
        server.close()
        raise ValueError(f"cannot use {args.connect or args.bind}: {e} (pick another "
                         "port, or stop the other backend)") from None
    except BaseException:
        server.close()
        raise
    _stop_on_signals(server.stop)
    server.run()
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from .broker.service import Broker, BrokerConfig

    _logging(args.verbose)
    _check_limits(args)
    _check_keys(args.keys, "server")
    broker = Broker(BrokerConfig(frontend=args.frontend, backend=args.backend, keys=args.keys,
                                 session_timeout=args.session_timeout,
                                 max_sessions=args.max_sessions,
                                 client_sessions=args.client_sessions,
                                 client_mb=args.client_mb, max_message_mb=args.max_message_mb))
    try:
        front, back = broker.bind()
    except zmq.ZMQError as e:
        broker.close()
        raise ValueError(f"cannot bind {args.frontend} / {args.backend}: {e} (pick other "
                         "ports, or stop the other broker)") from None
    except BaseException:
        broker.close()
        raise
    print(f"painted-skin broker: listening on {front} (clients) {back} (workers)", flush=True)
    _stop_on_signals(broker.stop)
    broker.run()
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from .auth import create_keys

    paths = create_keys(args.dir)
    print(f"painted-skin keys: server {paths['server_secret']} (keep on the backend and "
          f"broker), client {paths['client_secret']} (give to clients with {paths['server']}), "
          f"worker {paths['worker_secret']} (give to broker workers with {paths['server']}); "
          f"allowed clients: {Path(args.dir) / '*.key'}, "
          f"allowed workers: {Path(args.dir) / 'workers' / '*.key'}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add serve, broker and keys to the ``painted-skin`` subcommands."""
    s = sub.add_parser("serve", help="run a backend (ZeroMQ ROUTER, or a worker of a broker)")
    s.add_argument("--bind", default="tcp://127.0.0.1:5555",
                   help="client endpoint (port * picks a free one); non-loopback needs --keys")
    s.add_argument("--connect", metavar="URL",
                   help="be a worker of the broker at URL (its --backend) instead of binding")
    s.add_argument("--pipeline", default="echo", help="default pipeline, loaded at start")
    s.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    s.add_argument("--credits", type=_positive_int, default=4,
                   help="frames a session may have outstanding (default 4)")
    s.add_argument("--session-timeout", type=float, default=10.0,
                   help="free the sessions of clients silent this long, seconds (default 10)")
    s.add_argument("--cache-mb", type=float, default=512.0, help="result cache size (MB)")
    s.add_argument("--keys", metavar="DIR", help="CurveZMQ keys (painted-skin keys DIR)")
    s.add_argument("--no-shm", action="store_true",
                   help="never take frames through shared memory from local clients")
    s.add_argument("-v", "--verbose", action="store_true")
    _limit_args(s, 256)
    s.set_defaults(func=cmd_serve)

    b = sub.add_parser("broker", help="Paranoid Pirate broker: many workers behind one address")
    b.add_argument("--frontend", default="tcp://127.0.0.1:5555", help="client endpoint")
    b.add_argument("--backend", default="tcp://127.0.0.1:5556", help="worker endpoint")
    b.add_argument("--session-timeout", type=float, default=10.0,
                   help="free the sessions of clients silent this long, seconds (default 10)")
    b.add_argument("--keys", metavar="DIR", help="CurveZMQ keys (painted-skin keys DIR)")
    b.add_argument("-v", "--verbose", action="store_true")
    _limit_args(b, 1024)
    b.set_defaults(func=cmd_broker)

    k = sub.add_parser("keys", help="make CurveZMQ server and client key pairs in DIR")
    k.add_argument("dir", metavar="DIR")
    k.set_defaults(func=cmd_keys)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="painted-skin")
    add_commands(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except (InsecureEndpoint, ValueError, FileNotFoundError) as e:
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

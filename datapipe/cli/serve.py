"""`datapipe serve`: the read-only browser of a store, on http://127.0.0.1:8765 unless told
otherwise."""

from __future__ import annotations

import ipaddress
import socket

import click

from datapipe.cli.options import parse_storage_options, storage_options
from datapipe.errors import ConfigError


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.argument("store_url", metavar="STORE", default="storage")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback lets whoever reaches the port read the data.",
)
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port (0: any free one).",
)
@click.option(
    "-o",
    "--storage-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="fsspec storage option for the store (as `datapipe -o`; repeatable).",
)
def serve(store_url: str, host: str, port: int, options: tuple[str, ...]) -> None:
    """Browse STORE in a web browser: datasets, versions, samples (read-only; needs the [serve]
    extra)."""
    try:
        import uvicorn

        from datapipe.serve.app import LOOPBACK_NAMES, create_app
    except ImportError as e:
        raise ConfigError(
            f"datapipe serve needs the [serve] extra ({e.name} is missing): pip "
            "install 'datapipe[serve]'"
        ) from None
    from datapipe.versioning.store import Store

    store = Store(store_url, {**storage_options(), **parse_storage_options(options)})
    # a store that cannot be listed fails here, with its message, not at the first page
    store.datasets()
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {host}: anyone who can reach port {port} can "
            f"read every dataset in {store_url}",
            err=True,
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # bound here, so the URL printed is the one listening (port 0: the free port the system gave)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog from now on, until uvicorn takes them
    except OSError as e:
        sock.close()
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({e.strerror}); pick another "
            "--port, or 0 for any free one"
        ) from None
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"datapipe serve: browsing {store_url} at http://{shown}:{port}/ (Ctrl-C stops it)")
    # on loopback, only requests that name it (no DNS-rebound site's name); off it, the name users
    # reach it by
    hosts = list(LOOPBACK_NAMES) if is_loopback(host) else None
    server = uvicorn.Server(
        uvicorn.Config(create_app(store, allowed_hosts=hosts), log_level="warning")
    )
    server.run(sockets=[sock])

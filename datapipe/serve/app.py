"""The Starlette app: routes, the headers every answer carries, and DatapipeErrors as error
pages."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datapipe.errors import DatapipeError, NotFoundError
from datapipe.serve import pages
from datapipe.serve.resolve import Versions
from datapipe.serve.samples import Thumbnails
from datapipe.storage.byte_size import format_size
from datapipe.versioning.manifest import short_id
from datapipe.versioning.store import Store

log = logging.getLogger(__name__)

# no script at all, and nothing from elsewhere: data rendered into a page can never run
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action "
    "'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", CSP.encode()),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]

Handler = Callable[[Request], Awaitable[Response]]


class SecurityHeaders:
    """ASGI middleware that adds HEADERS to every response, error pages included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the headers at the response's start."""

        async def send_with(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with if scope["type"] == "http" else send)


def _guarded(env: Environment, handler: Handler) -> Handler:
    """``handler`` with DatapipeErrors (and any bug) as an error page: 404 for what is not there,
    else 500."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except NotFoundError as e:
            return _error(env, 404, str(e))
        except DatapipeError as e:
            return _error(env, 500, str(e))
        except Exception as e:  # a bug must not kill the server nor show a traceback to the browser
            log.exception("serve: %s failed", request.url.path)
            return _error(
                env, 500, f"internal error ({type(e).__name__}); the server log has the details"
            )

    return guarded


def _error(env: Environment, status: int, message: str) -> Response:
    return HTMLResponse(
        env.get_template("error.html").render(status=status, message=message), status
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request.app.state.env, 404, f"no page {request.url.path!r}")


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def create_app(
    store: Store | str,
    storage_options: dict[str, Any] | None = None,
    allowed_hosts: list[str] | None = None,
) -> Starlette:
    """The browser of ``store`` (a Store or its URL) as an ASGI app; read-only, every page
    server-rendered.

    ``allowed_hosts``: the Host header values answered (others get 400), so that a web page whose
    name resolves to 127.0.0.1 (DNS rebinding) cannot read the data through the visitor's browser;
    None answers any (`datapipe serve` passes LOOPBACK_NAMES when it listens on loopback).
    """
    if isinstance(store, str):
        store = Store(store, storage_options)
    env = Environment(loader=PackageLoader("datapipe.serve"), autoescape=True)
    env.filters["size"] = format_size
    env.filters["short"] = short_id  # a version id as listings show it
    static = resources.files("datapipe.serve").joinpath("static")
    files = {
        "style.css": (static.joinpath("style.css").read_bytes(), "text/css"),
        "icon.svg": (static.joinpath("icon.svg").read_bytes(), "image/svg+xml"),
    }
    context = pages.Context(env, Versions(store), Thumbnails())

    def static_file(name: str) -> Handler:
        data, media_type = files[name]

        async def serve_file(request: Request) -> Response:
            return Response(data, media_type=media_type, headers={"cache-control": "max-age=3600"})

        return serve_file

    # the two files by name, never a path from the URL
    routes = [Route(f"/static/{name}", static_file(name)) for name in files]
    routes.append(Route("/favicon.ico", static_file("icon.svg")))
    for path, handler in pages.routes(context):
        routes.append(Route(path, _guarded(env, handler)))
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
    app.state.env = env
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)
    # added last: outermost, so the 400 of a wrong host carries them too
    app.add_middleware(SecurityHeaders)
    return app

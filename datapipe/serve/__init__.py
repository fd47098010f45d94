"""`datapipe serve`: a read-only dataset browser (Starlette, Jinja2, uvicorn; the [serve] extra)."""

from datapipe.serve.app import create_app

__all__ = ["create_app"]

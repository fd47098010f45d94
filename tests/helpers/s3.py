"""The S3 server the tests talk to (moto's server mode on 127.0.0.1) and the fake credentials they
use."""

from __future__ import annotations

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing-key",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-print",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def storage_options(endpoint: str) -> dict[str, object]:
    """fsspec storage options that reach ``endpoint`` with the test credentials, whatever the
    environment holds."""
    return {
        "endpoint_url": endpoint,
        "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"region_name": "us-east-1"},
    }


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the server at ``endpoint``."""
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)


class S3Server:
    """moto's S3 app served by werkzeug on 127.0.0.1, in threads of this process.

    moto's ThreadedMotoServer puts every request through a dispatcher that, under one lock, lists
    moto's package directory to find the service; with a loader's download-ahead threads and
    DataLoader workers that lock is where most of a request's time went. This serves the S3 app
    alone, so requests run side by side."""

    def __init__(self) -> None:
        import logging
        import threading

        from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = make_server(
            "127.0.0.1",
            0,
            create_backend_app("s3"),
            threaded=True,
            request_handler=MotoRequestHandler,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="s3-server", daemon=True
        )
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving and wait for the server's thread."""
        self._server.shutdown()
        self._thread.join()

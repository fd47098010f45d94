import logging
import os
import uuid

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-print",
               "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API server (moto's server mode) on 127.0.0.1; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def s3(s3_server):
    """A fresh bucket per test module; credentials and the endpoint in the environment, as on a real machine."""
    import boto3

    with pytest.MonkeyPatch.context() as patch:
        for k, v in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3_server}.items():
            patch.setenv(k, v)
        bucket = f"bucket-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
        yield {"endpoint": s3_server, "bucket": bucket, "env": dict(os.environ)}

"""The S3 server the tests talk to (moto's server mode on 127.0.0.1) and the fake credentials they use."""

from __future__ import annotations

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-print",
               "AWS_DEFAULT_REGION": "us-east-1"}


def storage_options(endpoint: str) -> dict[str, object]:
    """fsspec storage options that reach ``endpoint`` with the test credentials, whatever the environment holds."""
    return {"endpoint_url": endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "client_kwargs": {"region_name": "us-east-1"}}


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the server at ``endpoint``."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                 region_name="us-east-1").create_bucket(Bucket=bucket)

"""Where things lie in a dataset store, and the names allowed in it.

Layout (documented in docs/reference/store.md and schemas/manifest.schema.json)::

    STORE/NAME/versions/VERSION/shard-000000.tar   shards (or .tfrecord) and their .idx
    STORE/NAME/versions/VERSION/train-000000.tar   ... named by their split, in a version with
    splits STORE/NAME/versions/VERSION/manifest.json      written last: a version is complete iff it
    exists STORE/NAME/versions/VERSION/rejected.parquet   quarantined rows, when there are any
    STORE/NAME/versions/VERSION/build-state.npz    what the build knew, for the next build
    STORE/NAME/versions/VERSION/pruned.json        a pruned version that still holds shards others
    share STORE/NAME/versions/.partial-ID/               a version being written (never listed)
    STORE/NAME/refs/latest, STORE/NAME/refs/TAG    a version id and a newline
    STORE/NAME/leases/ID.json                      a hold on a version (versioning/leases.py)
    STORE/NAME/rejected/TIME-ID.parquet            quarantine of a build that failed (kept for
    `datapipe rejected STORE/NAME --failed`: versioning/rejected.py)

A shard entry with ``stored_in`` lies in that version's directory instead (shared, stored once).
"""

from __future__ import annotations

import re

from datapipe.errors import ConfigError
from datapipe.versioning.manifest_parts import NAME_PATTERN

VERSIONS = "versions"
REFS = "refs"
LATEST = "latest"
PARTIAL_PREFIX = ".partial-"
OWNER_NAME = ".owner.json"
# what the build knew (builder/incremental.py): outside the manifest and the id
BUILD_STATE_NAME = "build-state.npz"
REF_NAME = re.compile(NAME_PATTERN)


def check_ref_name(ref: str) -> str:
    """Tags and refs: letters, digits, '.', '_', '-'; not starting with a dot."""
    if not REF_NAME.match(ref):
        raise ConfigError(
            f"invalid ref name {ref!r}: use letters, digits, '.', '_' and '-' (128 at most)"
        )
    return ref


def check_dataset_name(name: str) -> str:
    """Dataset names follow the ref rule, so they are safe as path components on every store."""
    if not REF_NAME.match(name):
        raise ConfigError(f"invalid dataset name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def parse_dataset_url(url: str) -> tuple[str, str, str]:
    """'STORE/NAME[@REF]' -> (store URL, name, ref or version prefix; 'latest' by default)."""
    head, _, last = url.rstrip("/").rpartition("/")
    if not last:
        raise ConfigError(
            f"{url!r} is not a dataset URL: expected STORE/NAME[@REF], e.g. storage/digits@latest"
        )
    name, _, ref = last.partition("@")
    return head or ".", check_dataset_name(name), ref or LATEST

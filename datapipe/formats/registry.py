"""Maps a format name to its writer, reader and file extension."""

from __future__ import annotations

from dataclasses import dataclass

from datapipe.errors import ConfigError
from datapipe.formats.base import ShardReader, ShardWriter
from datapipe.formats.tar.reader import TarShardReader
from datapipe.formats.tar.writer import TarShardWriter
from datapipe.formats.tfrecord.reader import TFRecordShardReader
from datapipe.formats.tfrecord.writer import TFRecordShardWriter
from datapipe.formats.tokens.reader import TokensShardReader
from datapipe.formats.tokens.writer import COMPANIONS, TokensShardWriter


@dataclass(frozen=True)
class ShardFormat:
    """One shard format: its name, file extensions (first = what we write) and classes.

    ``companions``: suffixes of the files written beside each shard, named by the shard's name
    with its extension replaced (``shard-000000.bin`` -> ``shard-000000.idx``); the shard's own
    index stays ``SHARD.idx`` (``shard-000000.bin.idx``).
    """

    name: str
    extensions: tuple[str, ...]
    writer: type[ShardWriter]
    reader: type[ShardReader]
    companions: tuple[str, ...] = ()

    @property
    def extension(self) -> str:
        """The extension given to shards we write."""
        return self.extensions[0]

    def companion_path(self, shard: str, suffix: str) -> str:
        """Where companion ``suffix`` of ``shard`` lives: the shard's path, its extension
        replaced."""
        ext = next((e for e in self.extensions if shard.lower().endswith(e)), "")
        return shard[: len(shard) - len(ext)] + suffix


FORMATS = {
    "webdataset": ShardFormat("webdataset", (".tar",), TarShardWriter, TarShardReader),
    "tfrecord": ShardFormat(
        "tfrecord", (".tfrecord", ".tfrecords", ".tfrec"), TFRecordShardWriter, TFRecordShardReader
    ),
    "tokens": ShardFormat("tokens", (".bin",), TokensShardWriter, TokensShardReader, COMPANIONS),
}
_ALIASES = {"tar": "webdataset", "wds": "webdataset", "tfrecords": "tfrecord", "megatron": "tokens"}
_BY_CODE = {f.writer.format_code: f for f in FORMATS.values()}


def get_format(name: str) -> ShardFormat:
    """The format called ``name`` (or an alias such as 'tar'); ConfigError listing the choices."""
    fmt = FORMATS.get(_ALIASES.get(name, name))
    if fmt is None:
        raise ConfigError(f"unknown shard format {name!r}; choose one of: {', '.join(FORMATS)}")
    return fmt


def format_for_code(code: int) -> ShardFormat | None:
    """The format whose index code is ``code``, if any."""
    return _BY_CODE.get(code)


def format_for_path(path: str) -> ShardFormat:
    """Guess a shard's format from its extension; ConfigError when the extension is unknown."""
    lower = path.lower()
    for fmt in FORMATS.values():
        if lower.endswith(fmt.extensions):
            return fmt
    known = ", ".join(e for f in FORMATS.values() for e in f.extensions)
    raise ConfigError(
        f"{path}: cannot tell the shard format from the name (known: {known}); pass --format"
    )

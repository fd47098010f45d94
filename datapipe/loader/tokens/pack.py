"""``datapipe.pack``: how a Loader turns the documents of token versions into fixed-length rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from datapipe.errors import ConfigError, did_you_mean

MODES = ("concat", "best-fit", "pad")
DOCUMENTS = ("separate", "joined")
LONG = ("split", "truncate")
MAX_LENGTH = 1 << 20


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(
            f"pack {name}={value!r} is not one of {', '.join(allowed)}"
            + did_you_mean([str(value)], allowed)
        )
    return str(value)


@dataclass(frozen=True)
class Pack:
    """Rows of ``length`` tokens (docs/guide/loading.md#packed-sequences has every mode).

    ``mode``: "concat" (documents back to back, cut into rows, no padding), "best-fit" (best-fit
    decreasing into padded rows, a window of shards at a time) or "pad" (one document or piece a
    row). ``documents``: "separate" (labels and positions stop at each document's end) or "joined"
    (plain causal rows). ``long``: a document longer than a row is cut into pieces ("split") or
    its tail is dropped and counted ("truncate"); concat always splits.
    """

    length: int
    mode: str = "concat"
    documents: str = "separate"
    long: str = "split"

    def __post_init__(self) -> None:
        if isinstance(self.length, bool) or not isinstance(self.length, int):
            raise ConfigError(f"pack length must be an integer, got {self.length!r}")
        if not 2 <= self.length <= MAX_LENGTH:
            raise ConfigError(
                f"pack length={self.length} is outside 2..{MAX_LENGTH} (2^20) tokens a row"
            )
        _choice("mode", self.mode, MODES)
        _choice("documents", self.documents, DOCUMENTS)
        _choice("long", self.long, LONG)

    def to_dict(self) -> dict[str, Any]:
        """The settings as the loader's state records them."""
        return asdict(self)

    def differences(self, saved: dict[str, Any]) -> list[str]:
        """'name: saved -> this' for each setting that differs from ``saved`` (a state's)."""
        ours = self.to_dict()
        return [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in ours.items() if saved.get(k) != v]

    @classmethod
    def parse(cls, text: str) -> Pack:
        """'length=4096,mode=best-fit' (the CLI's form) as a Pack."""
        options: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or name not in ("length", "mode", "documents", "long"):
                raise ConfigError(
                    f"--pack {text!r}: {part!r} is not NAME=VALUE with NAME one of length, mode, "
                    "documents, long"
                )
            options[name] = value
        if "length" not in options:
            raise ConfigError(f"--pack {text!r}: length=N is required")
        try:
            options["length"] = int(options["length"])
        except ValueError:
            raise ConfigError(f"--pack {text!r}: length must be an integer") from None
        return cls(**options)


def pack(
    length: int, mode: str = "concat", documents: str = "separate", long: str = "split"
) -> Pack:
    """The ``pack=`` of a Loader or ShardDataset: rows of ``length`` tokens made from a token
    version's documents (see ``Pack``)."""
    return Pack(length, mode, documents, long)

"""A map function that raised: the frames of the user's own code, and the record that raises."""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from typing import Any

import pandas as pd

from datapipe.builder.quarantine import row_json
from datapipe.builder.source.base import Part, Source
from datapipe.builder.source.registry import read_part
from datapipe.errors import UserCodeError

# where installed code lies (pandas, numpy, Dask, datapipe itself): never the user's frames
_INSTALLED = tuple(
    os.path.realpath(p) + os.sep
    for p in {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the datapipe package
    }
)


def _is_users(path: str, module_file: str, base_dir: str) -> bool:
    """Whether ``path`` is the map module's file, or another file of the pipeline's directory
    that is not installed code (a helper the module imports; not a venv kept in the project).
    Compiled frames (pandas' ``pandas/_libs/lib.pyx``) name no absolute file: never the user's."""
    if not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    if real == module_file:
        return True
    return real.startswith(base_dir) and not real.startswith(_INSTALLED)


def user_frames(
    error: BaseException, fn: Callable[..., Any], base_dir: str
) -> tuple[tuple[str, int, str, str], ...]:
    """The frames of ``error``'s traceback in the user's code, outermost first: (file, line,
    function, source line)."""
    code = getattr(fn, "__code__", None)
    module_file = os.path.realpath(code.co_filename) if code is not None else ""
    base = os.path.realpath(base_dir) + os.sep
    return tuple(
        (f.filename, f.lineno or 0, f.name, (f.line or "").strip())
        for f in traceback.extract_tb(error.__traceback__)
        if _is_users(f.filename, module_file, base)
    )


def _raises(fn: Callable[..., Any], frame: pd.DataFrame, kind: type[BaseException]) -> bool:
    try:
        fn(frame.copy())
    except kind:
        return True
    except Exception:  # another error on a part of the rows: not the one being looked for
        return False
    return False


def failing_row(fn: Callable[..., Any], frame: pd.DataFrame, kind: type[BaseException]) -> Any:
    """The index of one row of ``frame`` on which ``fn`` alone raises ``kind``, found by halving
    the rows (about 2 log2(n) calls); None when no single row does (rows that fail together)."""
    rows = frame
    while len(rows) > 1:
        half = len(rows) // 2
        for piece in (rows.iloc[:half], rows.iloc[half:]):
            if _raises(fn, piece, kind):
                rows = piece
                break
        else:
            return None
    return rows.index[0] if len(rows) == 1 and _raises(fn, rows, kind) else None


def map_failed(
    error: Exception, fn: Callable[..., Any], frame: pd.DataFrame, head: str, base_dir: str
) -> UserCodeError:
    """The UserCodeError for ``fn(frame)`` having raised ``error``: the user's frames, and in
    ``part_row`` the partition's row that raises alone (placed in its file by ``located``)."""
    failed = UserCodeError(head, user_frames(error, fn, base_dir))
    failed.part_row = failing_row(fn, frame, type(error))
    return failed


def located(error: UserCodeError, source: Source, part: Part, frame: pd.DataFrame) -> UserCodeError:
    """``error`` with the source file and row of the record that raised (``frame``: the rows the
    stage got, that record among them); as it is when no one record raises."""
    row = getattr(error, "part_row", None)
    if row is None:
        return error
    if part.members:  # a 'files' partition: a record is a file
        label, number = source.files[part.members[int(row)]].label, 1
    else:
        # the partition's place in its file: the records of the partitions before it there
        before = sum(
            read_part(source, p).rows_in
            for p in source.parts
            if p.file == part.file and p.number < part.number
        )
        label, number = source.files[part.file].label, before + int(row) + 1
    return error.located(label, number, row_json(frame, row))

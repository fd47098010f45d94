"""'class_folders' sources: ImageNet-style DIR/[GROUP/...]/CLASS/IMAGE, one row per image, labelled
by its folder.

The rows have the columns of ``COLUMNS``: ``key`` (the path with '/' and '.' made '_', a
valid sample key of every shard format: ``train/cat/1.jpg`` is ``train_cat_1_jpg``), ``path``
(relative to DIR), ``name``, ``class`` (the image's folder), ``label`` (the class's index in
the class list), ``group`` (the folders between DIR and the class folder, '' when none) and
``bytes`` (the file, unchanged).

The class list is the source's ``classes`` (pinned: a list, or a file of names one a line), or
else the sorted (Python str order) set of the class folders in the listing. With a pinned list,
an image whose folder is not in it is quarantined, never dropped or given a new label.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import pandas as pd

from datapipe.builder.config_parts import ClassesFile, class_names_problem
from datapipe.builder.source.base import InputFile, Part, RawPart, Source, SourceSpec, open_input
from datapipe.builder.source.files import FilesFormat
from datapipe.builder.source.listing import source_url
from datapipe.errors import ConfigError, NotFoundError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")  # matched case-insensitively
COLUMNS = ["key", "path", "name", "class", "label", "group", "bytes"]


def read_class_file(classes: ClassesFile, base_dir: str) -> list[str]:
    """The class names in ``classes.from_`` (relative to the pipeline file): one a line, stripped;
    blank lines and lines starting with '#' skipped. ConfigError naming ``source.classes.from`` when
    it cannot be used."""
    path = classes.from_
    full = path if os.path.isabs(path) else os.path.join(base_dir, path)
    try:
        with open(full, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise ConfigError(
            f"source.classes.from: {path!r} not found (looked for {full}); write the class names "
            "there, one a line, or list them in the pipeline file: classes: [cat, dog]"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"source.classes.from: cannot read {full} ({e}); it must be UTF-8 text, "
            "one class name a line"
        ) from None
    names = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    problem = class_names_problem(names)
    if problem is not None:
        raise ConfigError(f"source.classes.from: {full}: {problem}")
    return names


def pinned_classes(spec: SourceSpec, base_dir: str) -> list[str] | None:
    """The source's pinned class list (from the pipeline file or its classes file), or None."""
    classes = getattr(spec, "classes", None)
    if classes is None:
        return None
    return read_class_file(classes, base_dir) if isinstance(classes, ClassesFile) else list(classes)


def _relative(source: Source, f: InputFile) -> str:
    return f.path[len(source.options["root"]) :].lstrip("/")


def _is_image(rel: str) -> bool:
    """An image file of the layout: a known extension, no hidden file or folder ('.DS_Store',
    '.cache/')."""
    return rel.lower().endswith(IMAGE_EXTENSIONS) and not any(
        part.startswith(".") for part in rel.split("/")
    )


def sample_key(rel: str) -> str:
    """The sample key of the image at ``rel``: its path with '/' and '.' made '_' (the extension
    stays in, so that a.jpg and a.png beside it are two samples)."""
    return rel.replace("/", "_").replace(".", "_")


def class_names(source: Source) -> tuple[str, ...] | None:
    """The class names in label order, for the manifest; None for a source of another format."""
    return tuple(source.options["classes"]) if source.format == ClassFoldersFormat.name else None


class ClassFoldersFormat(FilesFormat):
    """Images in class folders, one labelled sample each: a 'files' source (no reader options, the
    same partitions) with its own listing check, class list and rows (``classes`` sits beside the
    options)."""

    name = "class_folders"

    def section_options(
        self, spec: SourceSpec, base_dir: str, fs: Any, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The directory (as a path of ``fs``) and the pinned classes, or None."""
        root = fs._strip_protocol(source_url(spec, base_dir)).rstrip("/")
        if not fs.isdir(root):
            raise ConfigError(
                f"source.path: {spec.path!r} is not a directory; a class_folders source names the "
                "directory of the class folders (DIR/<class>/<image>, or DIR/<split>/<class>/...)"
            )
        return {**options, "root": root + "/", "classes": pinned_classes(spec, base_dir)}

    def describe(
        self,
        fs: Any,
        files: tuple[InputFile, ...],
        options: dict[str, Any],
        dtypes: Mapping[str, str],
    ) -> Source:
        """The image files of the listing, and the class list: the pinned one, or the sorted folder
        names."""
        root = options["root"]
        images = tuple(f for f in files if _is_image(f.path[len(root) :]))
        if not images:
            raise NotFoundError(
                f"source.path: no {', '.join(IMAGE_EXTENSIONS)} files under {root} (a "
                "class_folders "
                "source reads DIR/<class>/<image>)"
            )
        classes = options["classes"]
        pinned = classes is not None
        if not pinned:
            rels = (f.path[len(root) :].split("/") for f in images)
            classes = sorted({parts[-2] for parts in rels if len(parts) >= 2})
        return Source(
            self.name,
            fs,
            images,
            (),
            {"root": root, "classes": classes, "pinned": pinned},
            has_header=False,
        )

    def read(self, source: Source, part: Part) -> RawPart:
        """One row per image; an image outside any class folder, or in one the pinned list lacks, a
        reject."""
        labels = {name: i for i, name in enumerate(source.options["classes"])}
        rows, ids, rejects = [], [], []
        for row, i in enumerate(part.members):
            f = source.files[i]
            rel = _relative(source, f)
            *folders, name = rel.split("/")
            if not folders:
                rejects.append(
                    (
                        row,
                        f"{rel}: the image is not in a class folder; put it in DIR/<class>/",
                        json.dumps({"path": rel}),
                    )
                )
                continue
            cls = folders[-1]
            if cls not in labels:
                rejects.append(
                    (
                        row,
                        f"{rel}: class {cls!r} is not in source.classes; add it to classes (at "
                        "the end, "
                        "so the other labels stay) or move the image",
                        json.dumps({"path": rel}),
                    )
                )
                continue
            with open_input(source, f, compression=None) as handle:
                content = handle.read()
            rows.append(
                [sample_key(rel), rel, name, cls, labels[cls], "/".join(folders[:-1]), content]
            )
            ids.append(row)
        frame = pd.DataFrame(rows, columns=COLUMNS, index=pd.Index(ids, dtype="int64"))
        frame["label"] = frame["label"].astype("int64")
        return RawPart(frame, len(part.members), rejects)

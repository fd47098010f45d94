"""class_folders sources: DIR/[group/]<class>/<image> in, labelled samples and the manifest's
classes out."""

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers.cli import datapipe_in_process
from PIL import Image

import datapipe
from datapipe.builder.config import load_pipeline, parse_pipeline
from datapipe.builder.run import build
from datapipe.errors import ConfigError, NotFoundError
from datapipe.versioning.manifest import REJECTED_NAME

FIELDS = "{jpg: bytes, cls: label, grp: group, klass: class, rel: path, nm: name}"


def jpeg(color=(200, 30, 30), size=(12, 8)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="JPEG", quality=90)
    return out.getvalue()


def pipeline(project, classes: str | None = None, extra: str = "", path: str = "data") -> None:
    line = f"  classes: {classes}\n" if classes is not None else ""
    project.write(
        "pipeline.yaml",
        f"name: pets\nsource:\n  path: {path}\n  format: class_folders\n{line}"
        f"sample: {{key: key, fields: {FIELDS}}}\nmax_rejected: 1\n{extra}",
    )


def labels(project, result) -> dict[str, tuple[int, str]]:
    """key -> (label, class) of every sample of a build."""
    return {s["__key__"]: (int(s["cls"]), s["klass"].decode()) for s in project.samples(result)}


def quarantine(project, result) -> pd.DataFrame:
    return pd.read_parquet(
        project.store.path("pets", "versions", result.manifest.version, REJECTED_NAME)
    )


def test_nested_split_folders_give_path_class_label_and_group(project):
    images = {
        "data/train/dog/a.jpg": jpeg(),
        "data/train/cat/b.JPEG": jpeg((0, 90, 0)),
        "data/val/cat/c.png": b"not checked here",
        "data/cat/d.jpg": jpeg((9, 9, 9)),
        "data/test/extra/dog/e.v2.jpg": jpeg(),
    }
    for name, data in images.items():
        project.write(name, data)
    project.write("data/README.txt", "not an image: not listed")
    project.write("data/train/cat/.DS_Store", b"\0")  # hidden: not listed
    project.write("data/loose.jpg", jpeg())  # in no class folder: quarantined
    pipeline(project)
    result = project.build()
    assert result.manifest.classes == ("cat", "dog")  # sorted folder names
    samples = {s["__key__"]: s for s in project.samples(result)}
    assert set(samples) == {
        "train_dog_a_jpg",
        "train_cat_b_JPEG",
        "val_cat_c_png",
        "cat_d_jpg",
        "test_extra_dog_e_v2_jpg",
    }
    cat = samples["train_cat_b_JPEG"]
    assert (cat["rel"], cat["nm"], cat["klass"], cat["cls"], cat["grp"]) == (
        b"train/cat/b.JPEG",
        b"b.JPEG",
        b"cat",
        b"0",
        b"train",
    )
    assert cat["jpg"] == images["data/train/cat/b.JPEG"]  # the bytes unchanged
    assert (
        samples["cat_d_jpg"]["grp"] == b""
        and samples["test_extra_dog_e_v2_jpg"]["grp"] == b"test/extra"
    )
    # checking images is the image stage's job
    assert samples["val_cat_c_png"]["jpg"] == b"not checked here"
    assert [s.path for s in result.manifest.lineage.sources] == sorted(
        f"{n}" for n in (*images, "data/loose.jpg")
    )
    rejected = quarantine(project, result)
    assert (
        list(rejected.source) == ["data/loose.jpg"]
        and "not in a class folder" in rejected.reason[0]
    )
    assert result.manifest.rejected_rows == 1


def test_unpinned_labels_follow_the_sorted_folders_pinned_ones_stay(project):
    for cls in ("cat", "dog"):
        project.write(f"data/{cls}/1.jpg", jpeg())
    pipeline(project)
    first = project.build()
    assert labels(project, first) == {"cat_1_jpg": (0, "cat"), "dog_1_jpg": (1, "dog")}

    # a new class, sorted first: unpinned, every label moves
    project.write("data/ant/1.jpg", jpeg())
    moved = project.build()
    assert moved.manifest.classes == ("ant", "cat", "dog")
    assert labels(project, moved) == {
        "ant_1_jpg": (0, "ant"),
        "cat_1_jpg": (1, "cat"),
        "dog_1_jpg": (2, "dog"),
    }

    # pinned as in the first version: the new class is quarantined, not labelled
    pipeline(project, "[cat, dog]")
    pinned = project.build()
    assert pinned.manifest.classes == ("cat", "dog")
    assert labels(project, pinned) == labels(project, first)
    rejected = quarantine(project, pinned)
    assert list(rejected.stage) == ["source"] and list(rejected.source) == ["data/ant/1.jpg"]
    assert "class 'ant' is not in source.classes; add it to classes" in rejected.reason[0]

    pipeline(project, "[cat, dog, ant]")  # added at the end: the old labels stay
    added = project.build()
    assert labels(project, added) == {
        "cat_1_jpg": (0, "cat"),
        "dog_1_jpg": (1, "dog"),
        "ant_1_jpg": (2, "ant"),
    }
    assert added.manifest.classes == ("cat", "dog", "ant") and added.manifest.rejected_rows == 0

    # renamed on disk, pin still says dog
    shutil.move(project.root / "data/dog", project.root / "data/hound")
    renamed = project.build()
    assert labels(project, renamed) == {"cat_1_jpg": (0, "cat"), "ant_1_jpg": (2, "ant")}
    assert "class 'hound' is not in source.classes" in quarantine(project, renamed).reason[0]
    pipeline(project, "[cat, hound, ant]")  # renamed in the pin too: same label
    assert labels(project, project.build())["hound_1_jpg"] == (1, "hound")


def test_classes_from_a_file_in_its_order(project):
    for cls in ("cat", "dog", "emu"):
        project.write(f"data/{cls}/1.jpg", jpeg())
    project.write("classes.txt", "# one class a line\ndog\n\n  emu  \ncat\n")
    pipeline(project, "{from: classes.txt}")
    result = project.build()
    assert result.manifest.classes == ("dog", "emu", "cat")
    assert labels(project, result) == {
        "dog_1_jpg": (0, "dog"),
        "emu_1_jpg": (1, "emu"),
        "cat_1_jpg": (2, "cat"),
    }
    assert result.manifest.lineage.pipeline["source"]["classes"] == {"from": "classes.txt"}

    # the file changes, the pipeline does not: a new id
    project.write("classes.txt", "dog\nemu\ncat\nyak\n")
    assert project.build().manifest.version != result.manifest.version


def test_classes_reach_info_the_manifest_file_and_the_dataset(project):
    for cls in ("cat", "dog"):
        project.write(f"data/{cls}/1.jpg", jpeg())
    pipeline(project)
    result = project.build()
    url = f"{project.store.url}/pets"
    assert datapipe.open_dataset(url).manifest.classes == ("cat", "dog")
    text = datapipe_in_process("info", url).stdout
    assert "2 classes (label name): 0 cat, 1 dog" in text
    info = json.loads(datapipe_in_process("info", url, "--json").stdout)
    assert info["classes"] == ["cat", "dog"]
    raw = json.loads(
        open(
            project.store.path("pets", "versions", result.manifest.version, "manifest.json")
        ).read()
    )
    assert raw["classes"] == ["cat", "dog"]


def test_other_sources_have_no_classes_in_config_or_manifest(project):
    project.write("raw/a.csv", "id,v\na,1\n")
    project.write(
        "p.yaml",
        "name: t\nsource: {path: raw/a.csv, format: csv}\nsample: {key: id, fields: {cls: v}}\n",
    )
    result = project.build("p.yaml")
    assert (
        "classes" not in result.manifest.lineage.pipeline["source"]
        and result.manifest.classes is None
    )
    raw = project.store.path("t", "versions", result.manifest.version, "manifest.json")
    assert "classes" not in json.loads(open(raw).read())


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "{path: d, format: csv, classes: [a]}",
            "source.classes: only a class_folders source takes classes",
        ),
        (
            "{path: d, format: class_folders, classes: [a, a]}",
            "source.classes: class 'a' is listed twice",
        ),
        (
            "{path: d, format: class_folders, classes: []}",
            "source.classes: the class list is empty",
        ),
        ("{path: d, format: class_folders, classes: [a/b]}", "'a/b' is not a folder name"),
        (
            "{path: d, format: class_folders, classes: {file: x}}",
            "source.classes: expected {from: FILE}",
        ),
        (
            "{path: d, format: class_folders, classes: 3}",
            "source.classes: expected a list of class names",
        ),
        (
            "{path: d, format: class_folders, classes: [1, b]}",
            "source.classes: class names are strings; quote 1",
        ),
        (
            "{path: d, format: class_folders, options: {sep: ','}}",
            "source.options.sep: the class_folders reader does not take this option",
        ),
    ],
)
def test_bad_source_sections_name_the_field(source, expected):
    with pytest.raises(ConfigError) as info:
        parse_pipeline(
            f"name: t\nsource: {source}\nsample: {{key: key, fields: {{jpg: bytes}}}}\n", "p.yaml"
        )
    assert expected in str(info.value) and "p.yaml:2" in str(info.value)


def test_a_missing_classes_file_or_a_file_path_is_a_config_error(project):
    project.write("data/cat/1.jpg", jpeg())
    pipeline(project, "{from: nowhere.txt}")
    with pytest.raises(ConfigError, match=r"source.classes.from: 'nowhere.txt' not found"):
        build(load_pipeline(project.root / "pipeline.yaml"), project.store)
    project.write("dupes.txt", "cat\ncat\n")
    pipeline(project, "{from: dupes.txt}")
    with pytest.raises(
        ConfigError, match=r"source.classes.from: .*dupes.txt: class 'cat' is listed twice"
    ):
        build(load_pipeline(project.root / "pipeline.yaml"), project.store)
    pipeline(project, path="data/cat/1.jpg")
    with pytest.raises(ConfigError, match=r"source.path: 'data/cat/1.jpg' is not a directory"):
        build(load_pipeline(project.root / "pipeline.yaml"), project.store)
    project.write("empty/cat/notes.txt", "no images")
    pipeline(project, path="empty")
    with pytest.raises(NotFoundError, match=r"source.path: no .jpg, .jpeg, .png files under"):
        build(load_pipeline(project.root / "pipeline.yaml"), project.store)


def test_the_images_example_builds_with_its_broken_images_quarantined(project):
    pipelines = Path(__file__).parents[2] / "pipelines"
    subprocess.run(
        [
            sys.executable,
            str(pipelines / "prepare_images.py"),
            "--out",
            str(project.root / "raw/images"),
        ],
        check=True,
        capture_output=True,
    )
    shutil.copy(pipelines / "images.yaml", project.root / "images.yaml")
    result = project.build("images.yaml")
    assert result.manifest.classes == ("circle", "square", "stripes")
    assert (result.manifest.samples, result.manifest.rejected_rows) == (30, 2)
    sizes = [Image.open(io.BytesIO(s["jpg"])).size for s in project.samples(result)]
    assert max(max(size) for size in sizes) == 256  # resize: max_side 256


def test_class_folders_on_another_filesystem(project):
    import uuid

    import fsspec

    root = f"/cf-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    for path in ("train/cat/1.jpg", "train/dog/2.jpg"):
        fs.pipe_file(f"{root}/{path}", jpeg())
    try:
        pipeline(project, path=f"'memory://{root}'")
        result = project.build()
        assert result.manifest.classes == ("cat", "dog")
        assert {s["rel"] for s in project.samples(result)} == {
            b"train/cat/1.jpg",
            b"train/dog/2.jpg",
        }
    finally:
        fs.rm(root, recursive=True)

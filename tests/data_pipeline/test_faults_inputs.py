"""Bad inputs at the reader: each becomes a reason-coded row or a one-line error naming the file."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.formats import InputFile
from data_pipeline.inputs import check_output_apart, plan_inputs
from data_pipeline.readers import Fields, read_unit
from pretrain.errors import InputError
from tests.data_pipeline.readall import read_all

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"


def _read(path: Path, **kwargs) -> tuple[pa.Table, dict]:
    table, stats = read_all(path, shard_rows=4, batch_rows=3, **kwargs)
    assert table is not None
    return table, stats


def test_fixture_records_become_rows_with_reasons() -> None:
    table, stats = _read(DATA / "docs.jsonl")
    reasons = dict(
        zip(table.column("id").to_pylist(), table.column("_read_reason").to_pylist(), strict=True)
    )
    assert stats["records"] == table.num_rows == 13
    assert reasons["docs/docs.jsonl:9"] == "malformed_json"
    assert reasons["docs/docs.jsonl:10"] == "undecodable"
    assert reasons["docs/no-text"] == "missing_text"
    assert reasons["docs/prose-00002"] is None  # the record's own id, namespaced by its input
    assert table.column("_shard").to_pylist()[:5] == ["docs-00000"] * 4 + ["docs-00001"]


def test_ids_and_splits_are_stable(tmp_path: Path) -> None:
    first, _ = _read(DATA / "pages.warc.gz")
    copy = tmp_path / "elsewhere" / "pages.warc.gz"
    copy.parent.mkdir()
    shutil.copy(DATA / "pages.warc.gz", copy)
    second, _ = _read(copy)
    assert first.column("id").equals(second.column("id"))
    assert first.column("split").equals(second.column("split"))
    assert all(i.startswith("pages/urn:uuid:") for i in first.column("id").to_pylist())


def test_truncated_gzip_keeps_what_was_read_and_records_the_rest(tmp_path: Path) -> None:
    data = gzip.compress((DATA / "docs.jsonl").read_bytes())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    table, stats = _read(path)
    reasons = table.column("_read_reason").to_pylist()
    assert reasons[-1] == "truncated_input" and stats["records"] == table.num_rows
    assert 1 <= reasons.count(None) < 12


def test_truncated_warc_record(tmp_path: Path) -> None:
    data = (DATA / "pages.warc.gz").read_bytes()
    path = tmp_path / "cut.warc.gz"
    path.write_bytes(data[: int(len(data) * 0.6)])
    table, _ = _read(path)
    reasons = table.column("_read_reason").to_pylist()
    assert reasons[-1] == "truncated_record"
    assert reasons[:-1] and all(r is None for r in reasons[:-1])


def test_corrupt_gzip_bytes_mid_stream(tmp_path: Path) -> None:
    data = bytearray(gzip.compress((DATA / "docs.jsonl").read_bytes()))
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(bytes(data))
    table, _ = _read(path)
    # zlib refuses the member: named as what it is
    assert table.column("_read_reason").to_pylist()[-1] == "corrupt_gzip"


def test_file_that_is_not_gzip_is_a_one_line_error_or_a_reject(tmp_path: Path) -> None:
    path = tmp_path / "fake.jsonl.gz"
    path.write_bytes(b'{"text": "plain, not gzip"}\n')
    with pytest.raises(InputError, match=r"fake.jsonl.gz.*not a gzip file"):
        _read(path)
    table, _ = _read(path, on_unreadable="reject")
    assert table.column("_read_reason").to_pylist() == ["unreadable_file"]


def test_parquet_missing_text_column(tmp_path: Path) -> None:
    path = tmp_path / "notext.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["hello"]}), path)
    with pytest.raises(InputError, match=r"notext.parquet.*no 'text' column.*body"):
        _read(path)
    table, _ = _read(path, on_unreadable="reject")
    assert table.column("_read_reason").to_pylist() == ["unreadable_file"]
    renamed, _ = _read(path, fields=Fields(text="body"))
    assert renamed.column("text").to_pylist() == ["hello"]


def test_parquet_rows_keep_extra_columns_as_meta() -> None:
    table, _ = _read(DATA / "code.parquet")
    meta = {e["key"]: e["str"] for e in table.column("meta")[0].as_py()}
    assert meta["programming_language"] == "python"


def test_input_planning(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        plan_inputs([str(tmp_path / "missing")])
    for name in ("a.jsonl", "b.warc.gz", "notes.txt"):
        shutil.copy(DATA / "docs.jsonl", tmp_path / name)
    files = plan_inputs([str(tmp_path)])
    assert [(f.stem, f.format) for f in files] == [("a", "jsonl"), ("b", "warc")]
    (tmp_path / "sub").mkdir()
    shutil.copy(DATA / "docs.jsonl", tmp_path / "sub" / "a.jsonl")
    assert [f.stem for f in plan_inputs([str(tmp_path)])] == ["a", "b", "sub__a"]
    shutil.copy(DATA / "docs.jsonl", tmp_path / "sub__a.jsonl")  # `sub/a` written flat
    with pytest.raises(InputError, match="both write shards named sub__a-"):
        plan_inputs([str(tmp_path)])


def _gz(path: Path, text: str = "one document") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(f'{{"text": "{text}"}}\n'.encode()))


def test_one_file_name_in_many_folders_gets_a_stem_per_folder(tmp_path: Path) -> None:
    """Dolma's `documents/<source>/part-0000.json.gz` and RedPajama-V2's
    `<snapshot>/<shard>/en_head.json.gz` were refused (one name, one stem): a file below an
    input folder is named by its folders, so its shards, ids and resume records stay apart."""
    docs, red = tmp_path / "documents", tmp_path / "rp"
    for name in ("cc/part-0000.json.gz", "books/part-0000.json.gz"):
        _gz(docs / name)
    for name in ("2023-06/0000/en_head.json.gz", "2023-06/0001/en_head.json.gz"):
        _gz(red / name)
    expected = ["books__part-0000", "cc__part-0000"]
    assert [f.stem for f in plan_inputs([str(docs)])] == expected
    assert [f.stem for f in plan_inputs([f"{docs}/*/part-0000.json.gz"])] == expected
    assert [f.stem for f in plan_inputs([f"file://{docs}"])] == expected
    assert [f.stem for f in plan_inputs([str(red)])] == [
        "2023-06__0000__en_head",
        "2023-06__0001__en_head",
    ]
    # stable: files added beside them rename none of them (a rerun keeps every finished part)
    _gz(docs / "part-0000.json.gz")
    _gz(docs / "wiki" / "part-0000.json.gz")
    assert [f.stem for f in plan_inputs([str(docs)])] == [
        *expected,
        "part-0000",
        "wiki__part-0000",
    ]
    ids = [_read_uri(f)[0].column("id")[0].as_py() for f in plan_inputs([str(docs)])]
    assert len(set(ids)) == 4 and ids[1].startswith("cc__part-0000/"), ids  # ids kept apart
    [item] = plan_inputs([str(docs / "cc" / "part-0000.json.gz")])  # named directly: its name
    assert item.stem == "part-0000"


def test_a_file_reached_by_two_names_is_read_once_and_the_other_listed(tmp_path: Path) -> None:
    """A link or a second entry to a file already listed would read its documents twice."""
    crawl = tmp_path / "crawl"
    _gz(crawl / "a.json.gz")
    os.link(crawl / "a.json.gz", crawl / "b.json.gz")  # a hard link: one file, two names
    (tmp_path / "alias.json.gz").symlink_to(crawl / "a.json.gz")
    skipped: list[dict[str, str]] = []
    files = plan_inputs([str(crawl), str(tmp_path / "alias.json.gz")], skipped)
    assert [f.path for f in files] == [str(crawl / "a.json.gz")]
    assert {s["path"]: s["reason"] for s in skipped} == {
        str(crawl / "b.json.gz"): f"the same file as {crawl / 'a.json.gz'}",
        str(tmp_path / "alias.json.gz"): f"the same file as {crawl / 'a.json.gz'}",
    }


def test_uris_go_through_pyarrow_filesystems(tmp_path: Path) -> None:
    shutil.copy(DATA / "docs.jsonl", tmp_path / "docs.jsonl")
    [item] = plan_inputs([f"file://{tmp_path}"])
    assert item.path == f"file://{tmp_path}/docs.jsonl" and item.stem == "docs"
    table, stats = _read_uri(item)
    assert stats["records"] == table.num_rows == 13
    with pytest.raises(InputError, match="nosuchscheme://x/y"):
        plan_inputs(["nosuchscheme://x/y"])


def _read_uri(item) -> tuple[pa.Table, dict]:
    stats: list[dict] = []
    options = {"shard_rows": 100, "batch_rows": 50, "eval_fraction": 0.005, "stats": stats}
    tables = list(read_unit((item,), item.stem, **options))
    return pa.concat_tables(tables), stats[0]


@pytest.mark.parametrize(
    ("entry", "output"),
    [
        ("s3://crawl/in", "s3://crawl//in/out"),
        ("s3://crawl/in/", "s3://crawl/in/out/"),
        ("S3://crawl/in", "s3://crawl/in/out"),
        ("s3://crawl/in?region=us-east-1", "s3://crawl/in/out"),
        ("{tmp}/crawl", "file://{tmp}/crawl/out"),
        ("file://{tmp}/crawl/", "{tmp}/crawl/sub/../out"),
    ],
)
def test_an_output_inside_an_input_is_caught_however_its_uri_is_written(
    tmp_path: Path, entry: str, output: str
) -> None:
    """The check compared strings: `s3://crawl//in/out` (pyarrow reads `crawl/in/out`), a
    scheme in capitals, a query or a `file://` form beside a plain path slipped through."""
    (tmp_path / "crawl").mkdir()
    entry, output = entry.format(tmp=tmp_path), output.format(tmp=tmp_path)
    with pytest.raises(InputError, match="lies inside the input directory"):
        check_output_apart([entry], output, [])
    inside = output.rstrip("/") + "//x.jsonl"
    with pytest.raises(InputError, match="lies inside the output"):
        check_output_apart([inside], output, [InputFile(inside, "jsonl", "x")])
    check_output_apart(["s3://crawl/input"], "s3://crawl/in", [])  # a prefix, not a folder


_BIND_CHILD = """
import json, subprocess, sys
from data_pipeline.inputs import check_output_apart, plan_inputs
from pretrain.errors import InputError
crawl, view, output = sys.argv[1:4]
subprocess.run(["mount", "--bind", crawl, view], check=True)
said = []
for entries, out in (([crawl], f"{view}/out"), ([f"{view}/a.jsonl"], crawl)):
    try:
        check_output_apart(entries, out, plan_inputs(entries))
        said.append("")
    except InputError as exc:
        said.append(str(exc))
print(json.dumps(said))
"""


def test_an_output_inside_an_input_through_a_bind_mount_is_caught(tmp_path: Path) -> None:
    """`/data/crawl` bind-mounted at `/mnt/view`: output /mnt/view/out is inside the input
    /data/crawl (same device and inode), though no path of one is below the other's. Run in a
    private mount namespace (`unshare`), so no mount outlives the test."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("needs unshare(1) and mount(8) for a private bind mount")
    crawl, view = tmp_path / "crawl", tmp_path / "view"
    crawl.mkdir()
    view.mkdir()
    (crawl / "a.jsonl").write_text('{"text": "one document"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    argv = [sys.executable, "-c", _BIND_CHILD, str(crawl), str(view), "out"]
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"this machine allows no private mount namespace: {done.stderr[-200:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = json.loads(done.stdout)
    assert "lies inside the input directory" in first, first
    assert "lies inside the output" in second, second


def test_a_stem_too_long_for_a_file_name_is_a_one_line_error_naming_the_file(
    tmp_path: Path,
) -> None:
    """Folders joined into a stem (or one long file name) could make shard names longer than a
    file name may be (255 bytes): the job would fail mid-run writing them."""
    deep = tmp_path / "in" / ("f" * 100) / ("g" * 100)
    _gz(deep / "part-0000.json.gz")
    with pytest.raises(InputError) as caught:
        plan_inputs([str(tmp_path / "in")])
    message = str(caught.value)
    assert str(deep / "part-0000.json.gz") in message and "\n" not in message
    assert "213 bytes, at most 180" in message  # 100 + 2 + 100 + 2 + len("part-0000")
    [item] = plan_inputs([str(deep.parent)])  # named from a folder nearer the file: it fits
    assert item.stem == f"{'g' * 100}__part-0000"
    _gz(tmp_path / "long" / f"{'x' * 181}.json.gz")
    with pytest.raises(InputError, match="181 bytes, at most 180"):
        plan_inputs([str(tmp_path / "long")])


@pytest.mark.parametrize("output_exists", [False, True])
def test_an_output_a_link_in_an_input_leads_to_is_refused_before_any_run(
    tmp_path: Path, output_exists: bool
) -> None:
    """`in/up -> ..` puts the output folder beside `in` inside the input walk: the first run
    went through (its output did not exist yet) and the next one refused its own shards as
    input, so the job could not be resumed. Now the first is refused, and so is any later."""
    work = tmp_path / "work"
    (work / "in").mkdir(parents=True)
    (work / "in" / "a.jsonl").write_text('{"text": "one document"}\n')
    (work / "in" / "up").symlink_to("..")
    out = work / "out"
    if output_exists:
        (out / "data").mkdir(parents=True)
    walked: dict = {}
    files = plan_inputs([str(work / "in")], [], walked)
    with pytest.raises(InputError, match="through a symbolic link") as caught:
        check_output_apart([str(work / "in")], str(out), files, walked)
    assert str(work / "in" / "up") in str(caught.value)


def test_an_output_beside_an_input_with_no_link_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "sub" / "a.jsonl").write_text('{"text": "one document"}\n')
    (tmp_path / "in" / "again").symlink_to("sub")  # a link within the input: no loop out
    walked: dict = {}
    files = plan_inputs([str(tmp_path / "in")], [], walked)
    check_output_apart([str(tmp_path / "in")], str(tmp_path / "out"), files, walked)

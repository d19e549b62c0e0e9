"""Resume that cannot skip changed input or reuse a damaged part (issue 12 items 5, 6, 9), through
`pretrain data run` on the shared local Ray."""

from __future__ import annotations

import json
import os
import random
import re
import stat
from pathlib import Path

import pytest

from pretrain_app.cli import main

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]
WORDS = [
    "river",
    "mill",
    "water",
    "wheel",
    "grain",
    "door",
    "market",
    "bread",
    "stone",
    "bridge",
    "lantern",
    "orchard",
]


def _docs(path: Path, count: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = [
        json.dumps({"id": i, "text": " ".join(rng.choice(WORDS) for _ in range(40))})
        for i in range(count)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(inputs: list[Path], out: Path, capsys, *sets: str) -> tuple[dict, str]:
    argv = ["data", "run", str(REPO / "configs" / "pipeline.yaml")]
    listed = ",".join(str(p) for p in inputs)
    for item in (f"inputs=[{listed}]", f"output={out}", "shard_rows=8", *sets):
        argv += ["--set", item]
    assert main(argv) == 0
    captured = capsys.readouterr()
    return json.loads((out / "ledger.json").read_text()), captured.out + captured.err


def _texts(out: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "data").to_pylist()
    return {r["id"]: r["text"] for r in rows}


NO_GLOBAL = ("stages.dedup.enabled=false",)


def test_grown_input_is_read_again_and_unchanged_ones_reused(ray_local, tmp_path, capsys):
    keep, grow = _docs(tmp_path / "keep.jsonl", 10, 1), _docs(tmp_path / "grow.jsonl", 10, 2)
    out = tmp_path / "out"
    ledger, _ = _run([keep, grow], out, capsys, *NO_GLOBAL)
    assert ledger["documents_in"] == 20
    _docs(grow, 40, 2)
    ledger, said = _run([keep, grow], out, capsys, *NO_GLOBAL)
    assert ledger["documents_in"] == 50 and ledger["conservation"]["balanced"]
    assert re.search(r"\(2 of 7 parts reused\)", said)  # keep.jsonl's two parts
    assert len(_texts(out)) == 50


@pytest.mark.slow
def test_same_size_rewrite_with_the_old_mtime_is_detected(ray_local, tmp_path, capsys):
    source = _docs(tmp_path / "same.jsonl", 10, 3)
    out = tmp_path / "out"
    _run([source], out, capsys, *NO_GLOBAL)
    before = source.stat()
    data = bytearray(source.read_bytes())
    at = data.index(b"river")
    data[at : at + 5] = b"RIVER"
    source.write_bytes(bytes(data))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert source.stat().st_size == before.st_size
    _run([source], out, capsys, *NO_GLOBAL)
    assert any("RIVER" in text for text in _texts(out).values())


@pytest.mark.slow
def test_grown_input_with_dedup_on_is_fully_accounted(ray_local, tmp_path, capsys):
    source = _docs(tmp_path / "g.jsonl", 10, 4)
    out = tmp_path / "out"
    _run([source], out, capsys)
    _docs(source, 40, 4)
    ledger, _ = _run([source], out, capsys)
    assert ledger["documents_in"] == 40 and ledger["conservation"]["balanced"]
    assert len(_texts(out)) == 40


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for sub in ("data", "_rejects")
        for p in sorted((out / sub).iterdir())
    }


def test_damaged_part_is_recomputed_byte_identical(ray_local, tmp_path, capsys):
    source = _docs(tmp_path / "p.jsonl", 20, 5)
    with source.open("a") as handle:
        handle.write('{"id": "bad", "text": 7}\n')  # a reject, so _rejects/ has a file too
    out = tmp_path / "out"
    _run([source], out, capsys, *NO_GLOBAL)
    clean = _files(out)
    assert any(name.startswith("_rejects/") for name in clean)
    shard = out / "data" / "p-00001.parquet"
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # same size, one byte flipped
    shard.write_bytes(bytes(damaged))
    (out / "_rejects" / "p-00002.pq").unlink()
    scratch = out / ".parts" / "scratch"
    scratch.mkdir(exist_ok=True)
    (scratch / "left-by-a-killed-writer.tmp").write_bytes(b"half a shard")
    ledger, said = _run([source], out, capsys, *NO_GLOBAL)
    assert "(1 of 3 parts reused)" in said
    assert _files(out) == clean and ledger["conservation"]["balanced"]
    assert not scratch.exists() or not any(scratch.iterdir())
    for path in (out / "data").iterdir():
        assert path.suffix == ".parquet" and not path.name.startswith(".")
        assert stat.S_IMODE(path.stat().st_mode) & 0o044  # readable by group/others, not 0600


@pytest.mark.slow
def test_changed_stage_model_is_refused_in_one_line(ray_local, tmp_path, capsys):
    """Same config text, but the model file it names now holds other bytes: not a resume."""
    import shutil

    from data_pipeline.stages.langid import default_model_path

    model = tmp_path / "lid.ftz"
    shutil.copy(default_model_path(), model)
    source = _docs(tmp_path / "m.jsonl", 6, 6)
    out = tmp_path / "out"
    _run([source], out, capsys, *NO_GLOBAL, f"stages.langid.model={model}")
    data = bytearray(model.read_bytes())
    data[-1] ^= 0xFF
    model.write_bytes(bytes(data))
    argv = ["data", "run", str(REPO / "configs" / "pipeline.yaml")]
    for item in (f"inputs=[{source}]", f"output={out}", "shard_rows=8", *NO_GLOBAL):
        argv += ["--set", item]
    argv += ["--set", f"stages.langid.model={model}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "stage models" in err and "overwrite=true" in err and "\n" not in err


@pytest.mark.slow  # two dedup runs: ~60-90 s under load
def test_a_changed_input_in_a_folder_layout_with_dotted_names_is_read_again_with_dedup_on(
    ray_local, tmp_path, capsys
):
    """Dolma and RedPajama layouts hold one file name in several folders, here a
    `c4-train.00000-of-01024.json.gz`-like name whose stem holds a dot: each file is its own
    input, named by its folder (`b__c4-train...`). A changed input's persisted dedup map side
    (`.parts/global/dedup/<stem>-00000.rows.pq`, kept after a finished run) must go with its
    parts: it was kept when the name was cut at its first dot, and the output held the old text
    of an edited document. The unchanged folder's map side is reused. The folders make the
    stems as long as a stem may be (inputs.MAX_STEM_BYTES): every file the job writes fits."""
    from data_pipeline.inputs import MAX_STEM_BYTES

    crawl, name = tmp_path / "documents", "c4-train.00000-of-00002.jsonl"
    long = MAX_STEM_BYTES - len("__c4-train.00000-of-00002")
    folders = ("a" * long, "b" * long)
    for folder, seed in zip(folders, (6, 7), strict=True):
        (crawl / folder).mkdir(parents=True)
        _docs(crawl / folder / name, 10, seed)
    out = tmp_path / "out"
    _run([crawl], out, capsys)
    source = crawl / folders[1] / name
    data = bytearray(source.read_bytes())
    at = data.index(b"river")
    data[at : at + 5] = b"RIVER"  # same rows, same size: the parts' row counts do not change
    source.write_bytes(bytes(data))
    ledger, said = _run([crawl], out, capsys)
    assert ledger["documents_in"] == 20 and ledger["conservation"]["balanced"]
    assert "dedup map output reused for 2 of 4 parts" in said, said
    current = {
        f"{folder}__{name.removesuffix('.jsonl')}/{i}": json.loads(line)["text"]
        for folder in folders
        for i, line in enumerate((crawl / folder / name).read_text().splitlines())
    }
    texts = _texts(out)
    assert len(texts) >= 18 and all(current[doc] == text for doc, text in texts.items())
    assert any("RIVER" in text for text in texts.values())

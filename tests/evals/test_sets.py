"""`pretrain eval build`: eval sets per domain/language from the eval split, decontaminated."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pretrain.artifacts import evalset
from pretrain.manifest import verify, write_manifest
from pretrain_app.cli import main
from trainer.scoring import load_eval_sets

DATA = Path(__file__).resolve().parents[1] / "data" / "evals"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
]


def _doc(seed: int, length: int = 80) -> str:
    return " ".join(
        WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(WORDS)] + str((seed + i) % 13)
        for i in range(length)
    )


def make_shards(root: Path) -> tuple[Path, str]:
    """Eval docs in web/en (3), code/en (2), web/zh (1), a dup_keep=false eval doc, training docs,
    and one training doc that is the first eval doc with two words changed (a near copy)."""
    rows = []
    for i in range(3):
        rows.append((f"web-e{i}", _doc(i), "eval", "web", "en", True))
    rows += [
        ("code-e0", _doc(10), "eval", "code", "en", True),
        ("code-e1", _doc(11), "eval", "code", "en", True),
        ("web-zh-e0", "中文文本" * 30, "eval", "web", "zh", True),
        ("web-dupe", _doc(12), "eval", "web", "en", False),
    ]
    rows += [(f"train-{i}", _doc(100 + i), "train", "web", "en", True) for i in range(30)]
    near = _doc(0).split()
    near[5], near[40] = "changed", "words"
    rows.append(("train-copy", " ".join(near), "train", "web", "en", True))
    columns = list(zip(*rows))
    table = pa.table(
        {
            "id": columns[0],
            "text": columns[1],
            "split": columns[2],
            "domain": columns[3],
            "lang": columns[4],
            "dup_keep": columns[5],
        }
    )
    (root / "data").mkdir(parents=True)
    pq.write_table(table.slice(0, 20), root / "data" / "a-00000.parquet")
    pq.write_table(table.slice(20), root / "data" / "a-00001.parquet")
    write_manifest(root, "shards")
    return root, "train-copy"


@pytest.mark.timeout(120)
def test_eval_build_cli_writes_decontaminated_sets(tmp_path, capsys):
    shards, copy_id = make_shards(tmp_path / "shards")
    config = {
        "shards": str(shards),
        "out": str(tmp_path / "evalsets"),
        "min_docs_per_set": 2,
        "tasks": [str(DATA / "tiny_mc.jsonl")],
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    out = tmp_path / "evalsets"
    manifest = verify(out)
    assert manifest["kind"] == "evalset"
    sets = {s["name"]: s["documents"] for s in manifest["sets"]}
    assert sets == {"web__en": 3, "code__en": 2}  # web/zh has 1 < min_docs; dup dropped
    report = json.loads((out / "report.json").read_text())
    assert report["skipped_groups"] == [{"domain": "web", "lang": "zh", "documents": 1}]
    assert evalset.open(out).contaminated_ids() == {copy_id}
    hits = pq.read_table(out / "contaminated.parquet").to_pylist()
    assert hits[0]["eval_id"] == "web-e0" and hits[0]["jaccard"] > 0.7
    loaded = load_eval_sets(out)
    assert {s.name for s in loaded} == {"web__en", "code__en"}
    assert (out / "tasks" / "tiny_mc.jsonl").is_file()
    assert "contaminated" in capsys.readouterr().out


CJK = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从"


def _zh(seed: int, length: int = 300) -> str:
    return "".join(random.Random(seed).choices(CJK, k=length))


@pytest.mark.timeout(120)
def test_a_chinese_eval_document_copied_into_training_is_contaminated(tmp_path):
    """Chinese has no spaces: the dedup stage shingles it by characters (its `lang` tag), and the
    eval documents are indexed the same way, so a near copy in the training split is found."""
    near = list(_zh(0))
    near[40], near[200] = "改", "变"
    rows = [
        ("zh-e0", _zh(0), "eval"),
        ("zh-e1", _zh(1), "eval"),
        ("zh-copy", "".join(near), "train"),
    ]
    rows += [(f"zh-t{i}", _zh(100 + i), "train") for i in range(5)]
    ids, texts, splits = zip(*rows)
    n = len(rows)
    table = pa.table(
        {"id": ids, "text": texts, "split": splits, "domain": ["web"] * n, "lang": ["zh"] * n}
    )
    shards = tmp_path / "shards"
    (shards / "data").mkdir(parents=True)
    pq.write_table(table, shards / "data" / "a-00000.parquet")
    write_manifest(shards, "shards")
    config = {"shards": str(shards), "out": str(tmp_path / "evalsets"), "min_docs_per_set": 2}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    assert evalset.open(tmp_path / "evalsets").contaminated_ids() == {"zh-copy"}


def test_eval_build_refuses_shards_without_eval_documents(tmp_path, capsys):
    root = tmp_path / "shards"
    (root / "data").mkdir(parents=True)
    pq.write_table(
        pa.table({"id": ["a"], "text": ["x y"], "split": ["train"]}),
        root / "data" / "a-00000.parquet",
    )
    write_manifest(root, "shards")
    (tmp_path / "eval.yaml").write_text(
        yaml.safe_dump({"shards": str(root), "out": str(tmp_path / "o")})
    )
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 2
    assert "no split == eval documents" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_task_files_are_checked_before_the_old_eval_set_is_replaced(tmp_path, capsys):
    """Two task files named alike were copied to one tasks/<name> (the second overwrote the
    first), and a bad task file was found only after the existing eval set was deleted."""
    shards, _ = make_shards(tmp_path / "shards")
    out = tmp_path / "evalsets"
    config = {"shards": str(shards), "out": str(out), "min_docs_per_set": 2}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    before = verify(out)
    rows = (DATA / "tiny_mc.jsonl").read_text().splitlines()
    for folder, text in (("a", rows[0]), ("b", rows[1]), ("bad", '{"context": 1}')):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mc.jsonl").write_text(text + "\n")
    for tasks, expected in (
        (["a", "b"], "mc.jsonl"),
        (["bad"], "string 'context'"),
    ):
        config["tasks"] = [str(tmp_path / t / "mc.jsonl") for t in tasks]
        (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
        capsys.readouterr()
        assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
        assert verify(out) == before  # the eval set already there is untouched


@pytest.mark.timeout(120)
def test_a_build_that_would_write_no_set_is_refused_and_keeps_the_old_sets(tmp_path, capsys):
    """min_docs_per_set above every group wrote an evalset of 0 sets (exit 0), and `eval run`
    then scored every checkpoint as bpb nan; min above max_docs_per_set left out every group."""
    shards, _ = make_shards(tmp_path / "shards")
    out = tmp_path / "evalsets"
    config = {"shards": str(shards), "out": str(out), "min_docs_per_set": 2}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    before = verify(out)
    capsys.readouterr()
    errors = []
    for overrides in (["min_docs_per_set=4"], ["max_docs_per_set=2", "min_docs_per_set=3"]):
        argv = ["eval", "build", str(tmp_path / "eval.yaml")]
        assert main([*argv, *(a for o in overrides for a in ("--set", o))]) == 2
        errors.append(capsys.readouterr().err)
        assert errors[-1].count("\n") == 1 and "min_docs_per_set" in errors[-1], errors[-1]
        assert verify(out) == before  # the old sets are still there, unchanged
    assert "the largest, web/en, has 3 eval documents" in errors[0]


def test_task_files_not_utf8_are_one_line_and_a_byte_order_mark_is_read(tmp_path, capsys):
    """A task file with a non-UTF-8 byte was a UnicodeDecodeError traceback; one saved by a
    Windows editor (UTF-8 with a byte order mark) was refused as 'not valid JSON'."""
    shards, _ = make_shards(tmp_path / "shards")
    good = '{"id": "c1", "context": "The cat sat on the", "continuation": " mat"}\n'
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(good.encode() + good.replace("cat", "caf\xe9").encode("latin-1"))
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + good.encode())
    for task, code in ((latin1, 2), (bom, 0)):
        out = tmp_path / f"sets-{task.stem}"
        config = {
            "shards": str(shards),
            "out": str(out),
            "min_docs_per_set": 2,
            "tasks": [str(task)],
        }
        (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
        assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == code
        err = capsys.readouterr().err
        if code:
            assert err.count("\n") == 1 and f"{task}:2: not UTF-8 (byte 0xe9" in err, err
        else:
            assert [(t["name"], t["kind"], t["examples"]) for t in verify(out)["tasks"]] == [
                ("bom", "cloze", 1)
            ]


def test_a_domain_label_with_a_slash_names_a_set_file_inside_sets(tmp_path, capsys):
    """A classifier label such as `news/sports` (labels are the user's) made the set's path
    sets/news/sports__en.parquet: a FileNotFoundError traceback, and `../x` pointed outside."""
    rows = [(f"e{i}", _doc(i), "eval", "news/sports", "en") for i in range(2)]
    rows += [(f"x{i}", _doc(20 + i), "eval", "../x", "en") for i in range(2)]
    rows += [(f"t{i}", _doc(100 + i), "train", "web", "en") for i in range(3)]
    names = ["id", "text", "split", "domain", "lang"]
    root = tmp_path / "shards"
    (root / "data").mkdir(parents=True)
    table = pa.table({n: list(column) for n, column in zip(names, zip(*rows), strict=True)})
    pq.write_table(table, root / "data" / "a-00000.parquet")
    write_manifest(root, "shards")
    out = tmp_path / "evalsets"
    config = {"shards": str(root), "out": str(out), "min_docs_per_set": 2}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (out / "sets").iterdir()) == [
        "..%2Fx__en.parquet",
        "news%2Fsports__en.parquet",
    ]
    assert not (tmp_path / "x__en.parquet").exists()
    loaded = {(s.domain, s.lang): len(s.texts) for s in load_eval_sets(out)}
    assert loaded == {("news/sports", "en"): 2, ("../x", "en"): 2}


MOONS = "Which planet in the solar system has the largest number of confirmed moons orbiting it?"
BOIL = (
    "At what temperature in degrees Celsius does pure water boil at sea level under standard "
    "pressure?"
)
PLANTED = {
    # a task question verbatim, inside an ordinary page
    "train-verbatim": f"Quiz night notes. {MOONS} Bring your own pens and arrive early.",
    # the question and its answer, with other punctuation and case
    "train-answer": f"trivia: {BOIL.upper()} -- 100! (it is less on a mountain)",
    # an FAQ holding two questions, one of them too short for a 13-gram (matched whole)
    "train-faq": "FAQ\n1. Who wrote the nineteenth century novel Pride and Prejudice? Jane "
    "Austen.\n2. What is the name of the capital city of Australia? Canberra, not Sydney.",
}
COMMON = (
    "The solar system has eight planets and many moons. At sea level water boils sooner than on "
    "a mountain, and in degrees Celsius that is a round number. Which planet is largest? The "
    "capital city of a country is often not its largest city, and the novel is a young form."
)


@pytest.mark.timeout(120)
def test_training_documents_holding_task_questions_are_contaminated(tmp_path, capsys):
    root = tmp_path / "shards"
    rows = [(f"web-e{i}", _doc(i), "eval", "web", "en") for i in range(3)]
    rows += [(f"train-{i}", _doc(100 + i), "train", "web", "en") for i in range(10)]
    rows += [(key, text, "train", "web", "en") for key, text in PLANTED.items()]
    rows.append(("train-common", COMMON, "train", "web", "en"))
    columns = list(zip(*rows))
    names = ["id", "text", "split", "domain", "lang"]
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.table(dict(zip(names, columns))), root / "data" / "a-00000.parquet")
    write_manifest(root, "shards")
    config = {
        "shards": str(root),
        "out": str(tmp_path / "evalsets"),
        "tasks": [str(DATA / "planted_qa.jsonl"), str(DATA / "tiny_mc.jsonl")],
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    out = tmp_path / "evalsets"
    assert evalset.open(out).contaminated_ids() == set(PLANTED)  # the common phrases are not enough
    hits = pq.read_table(out / "contaminated.parquet").to_pylist()
    assert {(h["train_id"], h["eval_id"]) for h in hits} == {
        ("train-verbatim", "qa-moons"),
        ("train-answer", "qa-boil"),
        ("train-faq", "qa-author"),
        ("train-faq", "qa-capital"),
    }
    assert {h["task"] for h in hits} == {"planted_qa"}
    report = json.loads((out / "report.json").read_text())
    tasks = {t["name"]: t for t in report["tasks"]}
    assert tasks["planted_qa"]["contaminated_examples"] == 4
    assert tasks["planted_qa"]["contaminated_train_documents"] == 3
    assert tasks["tiny_mc"]["contaminated_examples"] == 0
    assert tasks["tiny_mc"]["unchecked_examples"] == 3  # "the cat sat on the mat": too short
    assert verify(out)["tasks"] == report["tasks"]
    assert report["contaminated_by_tasks"] == 3
    assert "planted_qa" in capsys.readouterr().out


@pytest.mark.timeout(180)
def test_lm_eval_task_documents_in_training_data_are_contaminated(tmp_path):
    root = tmp_path / "shards"
    boolq = DATA / "lm_eval" / "boolq.jsonl"
    first = json.loads(boolq.read_text().splitlines()[0])
    rows = [(f"web-e{i}", _doc(i), "eval", "web", "en") for i in range(3)]
    rows += [(f"train-{i}", _doc(100 + i), "train", "web", "en") for i in range(5)]
    leaked = f"Prompt dump:\n{first['passage']}\nQuestion: {first['question']}?\nAnswer: yes"
    rows.append(("train-boolq", leaked, "train", "web", "en"))
    rows.append(("train-common", COMMON, "train", "web", "en"))
    names = ["id", "text", "split", "domain", "lang"]
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.table(dict(zip(names, zip(*rows)))), root / "data" / "a-00000.parquet")
    write_manifest(root, "shards")
    config = {"shards": str(root), "out": str(tmp_path / "ev"), "lm_eval": [f"boolq={boolq}"]}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", "build", str(tmp_path / "eval.yaml")]) == 0
    out = tmp_path / "ev"
    assert evalset.open(out).contaminated_ids() == {"train-boolq"}
    report = json.loads((out / "report.json").read_text())
    [entry] = report["lm_eval_tasks"]
    assert entry["name"] == "boolq" and entry["contaminated_examples"] == 1
    assert not (out / "tasks").exists()  # checked, not copied: `eval run --lm-eval` reads it

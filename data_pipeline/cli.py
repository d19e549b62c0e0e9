"""`pretrain data ...`: every data command's handler (a callable taking the parsed arguments and
returning the exit status) and `register`, which adds them to the `pretrain` parser."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pretrain.program import add_command, add_config_args, positive_int, resolve_config


def run(args: argparse.Namespace) -> int:
    """`pretrain data run CONFIG`: tag raw inputs into shards, ledger.json and a manifest."""
    from data_pipeline.config import PipelineConfig

    config = resolve_config(PipelineConfig, args, _preflight)
    if config is None:
        return 0
    from data_pipeline.runner import run_pipeline

    result = run_pipeline(config, ray_address=args.ray_address)
    print(f"pretrain data run: {result.summary()}")
    return 0


def _preflight(config: Any) -> str:
    from data_pipeline.runner import preflight

    skipped: list[dict[str, str]] = []
    stages, inputs = preflight(config, skipped)
    names = ", ".join(stage.name for stage in stages)
    return (
        f"{len(inputs)} input files open; stages {names} configured; models verified; "
        f"{len(skipped)} files of directory inputs skipped"
    )


def estimate(args: argparse.Namespace) -> int:
    """`pretrain data estimate CONFIG --input-bytes 40TB --nodes N --cpus-per-node C`."""
    from data_pipeline import estimate as model
    from data_pipeline.config import PipelineConfig
    from pretrain.config import load_config

    config = load_config(PipelineConfig, args.config, args.overrides)
    input_bytes = model.parse_bytes(args.input_bytes)
    sample = model.load_sample(Path(args.from_manifest or config.output), config.enabled_stages())
    result = model.project(
        sample,
        config,
        input_bytes,
        args.nodes,
        args.cpus_per_node,
        args.utilisation,
    )
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"pretrain data estimate: {model.format_estimate(result)}")
    return 0


def clean(args: argparse.Namespace) -> int:
    """`pretrain data clean DIR`: delete the global stages' persisted map output of a finished
    shards artifact; the artifact still verifies, and a run that needs it maps the parts again."""
    from data_pipeline import global_parts
    from pretrain import shards_layout as layout
    from pretrain.artifacts import shards as shards_artifact
    from pretrain.errors import ArtifactError
    from pretrain.locking import output_lock
    from pretrain.manifest import MANIFEST
    from pretrain.storage import is_uri, lock_target, output_path

    directory = args.directory
    if is_uri(directory):
        raise ArtifactError(
            f"{directory}: `pretrain data clean` works on local outputs; for an object store, "
            f"delete the prefix {directory.rstrip('/')}/{layout.GLOBAL_MAP_DIR}/ with its own "
            "tool (no manifest lists it)"
        )
    with output_lock(lock_target(directory)):  # no run may be writing it meanwhile
        if not (Path(directory) / MANIFEST).is_file():
            raise ArtifactError(
                f"{directory} has no {MANIFEST}: its run has not finished, and the persisted map "
                "side is what lets the re-run skip the parts already mapped; finish it with "
                "`pretrain data run CONFIG` first"
            )
        shards_artifact.open(directory, deep=False)
        files, size, links = global_parts.remove_all(output_path(directory))
    linked = f" and {links} links (not what they point at)" if links else ""
    print(
        f"pretrain data clean: removed {files} files ({size / 1e6:.1f} MB){linked} of "
        f"{layout.GLOBAL_MAP_DIR}/ from {directory}; it still verifies (`pretrain verify`)"
    )
    return 0


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: must be in (0, 1]")
    return value


def _add_estimate(dsub: Any) -> None:
    parser = add_command(
        dsub,
        ["data", "estimate"],
        estimate,
        "project node-hours, peak memory per node and output size of a data job at scale "
        "from a sample run's measured per-stage costs",
    )
    parser.add_argument("config", metavar="CONFIG", help="the pipeline config to project")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=VALUE")
    parser.add_argument("--input-bytes", required=True, help="e.g. 40TB, 500GB, 2PiB")
    parser.add_argument("--nodes", type=positive_int, required=True)
    parser.add_argument("--cpus-per-node", type=positive_int, required=True)
    parser.add_argument(
        "--from-manifest",
        default=None,
        metavar="DIR",
        help="output of a sample `pretrain data run` (default: CONFIG's output)",
    )
    parser.add_argument(
        "--utilisation",
        type=_fraction,
        default=None,
        help="share of the CPUs kept busy (default: the sample's measured one)",
    )
    parser.add_argument("--json", action="store_true", help="print the projection as JSON")


def train_classifier(args: argparse.Namespace) -> int:
    """`pretrain data train-classifier CONFIG`: a fastText classifier artifact; prints where it is
    and its held-out accuracy."""
    from data_pipeline.trainers.classifier import ClassifierConfig, check_out
    from data_pipeline.trainers.classifier import train_classifier as run

    config = resolve_config(ClassifierConfig, args, lambda config: _checked_out(check_out(config)))
    if config is None:
        return 0
    out = run(config)
    info = json.loads((Path(out) / "model.json").read_text(encoding="utf-8"))
    training = info["training"]
    accuracy = training.get("accuracy")
    shown = f"{accuracy:.3f}" if accuracy is not None else "n/a (no held-out records)"
    print(
        f"fasttext-model {config.name}: labels {', '.join(info['labels'])}; "
        f"{training['train_documents']} training documents; held-out accuracy {shown} on "
        f"{training['heldout_documents']} documents -> {out}"
    )
    return 0


def _checked_out(out: Path) -> str:
    return f"out = {str(out)!r} is new or empty"


def train_lm(args: argparse.Namespace) -> int:
    """`pretrain data train-lm CONFIG`: KenLM n-gram models (one per language) into a
    `kenlm-model` artifact."""
    from data_pipeline.trainers.lm import LanguageModelConfig, check_out
    from data_pipeline.trainers.lm import train_lm as run

    config = resolve_config(
        LanguageModelConfig, args, lambda config: _checked_out(check_out(config))
    )
    if config is None:
        return 0
    out = run(config)
    info = json.loads((Path(out) / "model.json").read_text(encoding="utf-8"))
    for lang, entry in info["languages"].items():
        print(
            f"kenlm-model {lang}: order {info['order']}, {entry['tokens']} tokens, "
            f"{entry['vocab_size']} words, held-out perplexity "
            f"{entry['heldout_perplexity']} -> {out / entry['file']}"
        )
    return 0


def register(sub: Any) -> None:
    data = sub.add_parser("data", help="data jobs: tag, filter, dedup raw text into shards")
    dsub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)
    run_parser = add_command(
        dsub,
        ["data", "run"],
        run,
        "run the tagging pipeline on raw inputs, writing tagged Parquet "
        "shards, ledger.json and a manifest",
    )
    add_config_args(run_parser)
    run_parser.add_argument(
        "--ray-address",
        default=None,
        help="existing Ray cluster (default: RAY_ADDRESS or a local instance)",
    )
    _add_estimate(dsub)
    clean_parser = add_command(
        dsub,
        ["data", "clean"],
        clean,
        "delete the persisted map output of global stages (.parts/global/) of a finished shards "
        "artifact; it still verifies, a later run maps those parts again",
    )
    clean_parser.add_argument("directory", metavar="DIR", help="a `pretrain data run` output")
    lm = add_command(
        dsub,
        ["data", "train-lm"],
        train_lm,
        "train a KenLM model artifact from reference text",
    )
    add_config_args(lm)
    clf = add_command(
        dsub,
        ["data", "train-classifier"],
        train_classifier,
        "train a fastText classifier artifact from labelled JSONL",
    )
    add_config_args(clf)

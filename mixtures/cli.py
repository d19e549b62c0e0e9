"""`pretrain mixture ...` commands."""

from __future__ import annotations

from typing import Any

from pretrain.cli_utils import add_command, add_config_args
from pretrain.placeholder import not_built


def register(sub: Any) -> None:
    mix = sub.add_parser("mixture", help="build and report global-quota data mixtures")
    msub = mix.add_subparsers(dest="mixture_command", metavar="MIXTURE_COMMAND", required=True)
    build = add_command(msub, ["mixture", "build"], not_built("pretrain mixture build", 6),
                        "build a mixture artifact (deterministic sample index) from a recipe")
    add_config_args(build)
    report = add_command(msub, ["mixture", "report"], not_built("pretrain mixture report", 6),
                         "target vs realised shares of a built mixture, with a plot")
    report.add_argument("directory", metavar="DIR")

"""The CPU patches touch megatron-core 0.16 internals: any other minor version is refused with the
fix, never patched blindly; the installed (tested) version passes."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from pretrain.errors import PretrainError
from trainer.cpu_compat import check_megatron_version


def test_the_installed_megatron_core_is_the_tested_one() -> None:
    assert version("megatron-core").startswith("0.16.")
    check_megatron_version()


@pytest.mark.parametrize("other", ["0.17.0", "0.15.2", "1.0.0", "0.160.0"])
def test_another_minor_version_is_refused_with_the_fix(other) -> None:
    with pytest.raises(PretrainError, match=r"megatron-core>=0.16.1,<0.17") as exc:
        check_megatron_version(other)
    assert other in str(exc.value) and "\n" not in str(exc.value)

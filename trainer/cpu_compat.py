"""Run megatron-core 0.16.1 without CUDA (gloo, fp32 or bf16). Its code assumes CUDA in places
(`device="cuda"`, `torch.cuda.current_device()`, `.cuda()`, CUDA RNG states, `torch.cuda.*Tensor`
type checks): on CPU `CpuDeviceMode` rewrites CUDA devices to CPU while the trainer calls into
megatron (about 2% overhead), and `apply_cpu_patches` makes the rest CPU no-ops. These are
private internals: another minor version is refused (`check_megatron_version`), not patched."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_PATCHED = False
TESTED_MEGATRON = "0.16."
"""The megatron-core minor version these patches were written against and tested with."""


def check_megatron_version(version: str | None = None) -> None:
    """Refuse a megatron-core whose private internals these CPU patches were not tested on."""
    from importlib.metadata import version as installed

    from pretrain.errors import PretrainError

    found = version if version is not None else installed("megatron-core")
    if not found.startswith(TESTED_MEGATRON):
        raise PretrainError(
            f"megatron-core {found} is installed, but running it without CUDA patches private "
            f"internals tested on {TESTED_MEGATRON}x only; install megatron-core>=0.16.1,<0.17 "
            "(pip install -c constraints.txt megatron-core) or train on a CUDA machine"
        )


def _is_cuda_device(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)


class CpuDeviceMode(TorchFunctionMode):
    """Rewrite CUDA device arguments to CPU for every torch call made under this mode."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name.replace("torch.", "torch.cuda.", 1) if "cuda" not in name else name
        device = kwargs.get("device")
        if device is not None and _is_cuda_device(device):
            kwargs = {**kwargs, "device": "cpu"}
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _cpu_rng_tracker(megatron_tracker: type) -> type:
    """Megatron's model-parallel RNG tracker keeping CPU generator states instead of CUDA ones:
    `add` and `fork` redone, its bookkeeping (reset, get/set_states) megatron's own."""

    class CpuRNGStatesTracker(megatron_tracker):  # type: ignore[valid-type, misc]
        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise RuntimeError(f"seed {seed} already exists")
            self.seeds_.add(seed)
            generator = torch.Generator()
            generator.manual_seed(seed)
            self.states_[name] = generator.get_state()

        @contextlib.contextmanager
        def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
            if name not in self.states_:
                raise RuntimeError(f"rng state {name} is not added")
            original = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(original)

    return CpuRNGStatesTracker


@functools.lru_cache(maxsize=16)
def _causal_mask(sq: int) -> torch.Tensor:
    return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)


def needs_cpu_patches(device: str) -> bool:
    """The one decision: patch only a run whose device is not CUDA ("cuda", "cuda:3" never)."""
    return not device.startswith("cuda")


def apply_cpu_patches(device: str) -> None:
    """Redirect megatron-core's CUDA-only paths to CPU (idempotent; no-op on a CUDA device).
    `device`: the run's, `trainer.model.device_type` (init_distributed calls this once)."""
    global _PATCHED
    if _PATCHED or not needs_cpu_patches(device):
        return
    check_megatron_version()
    from megatron.core.fusions import fused_softmax
    from megatron.core.tensor_parallel import random as mp_random
    from megatron.core.transformer import utils as transformer_utils

    torch.cuda.current_device = lambda: 0  # rewritten to CPU by CpuDeviceMode
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.empty_cache = lambda: None
    transformer_utils.get_default_causal_mask = _causal_mask
    fused_softmax.get_default_causal_mask = _causal_mask
    # Activation recompute saves and restores "the CUDA RNG state"; on CPU the CPU state it also
    # saves is the only one there is.
    mp_random._get_cuda_rng_state = lambda *args, **kwargs: torch.empty(0, dtype=torch.uint8)
    mp_random._set_cuda_rng_state = lambda *args, **kwargs: None
    mp_random.CudaRNGStatesTracker = _cpu_rng_tracker(mp_random.CudaRNGStatesTracker)
    mp_random._CUDA_RNG_STATE_TRACKER = mp_random.CudaRNGStatesTracker()
    mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    _PATCHED = True


def device_context() -> contextlib.AbstractContextManager:
    """The context to call megatron-core in: `CpuDeviceMode` once the run's device was patched
    (a CPU run), nothing on GPU."""
    return CpuDeviceMode() if _PATCHED else contextlib.nullcontext()

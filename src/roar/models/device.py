"""Where a stage computes (``runtime.device``), and how many sequences one gradient pass may take there.

``runtime`` is not a DVC parameter: the device changes speed and float rounding, not the study, so
switching it re-runs nothing. On the CPU every default here is what it was before GPUs were
supported, so CPU results stay bit-identical.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from roar.core.errors import RoarError
from roar.config.train_config import DEVICES

if TYPE_CHECKING:
    import torch

# Rows per gradient pass on the CPU: one IG sample of a 128-example batch per pass (stacking samples
# runs slower there: bench/bench_integrated_gradients.py).
CPU_ROWS = 128
# Most rows per pass on a GPU, however much memory is free (the former GPU default).
MAX_ROWS = 8192
# Share of the GPU memory still free that the activations of one pass may take: the backward pass
# allocates gradients as large as the biggest saved activations, and the allocator fragments.
MEMORY_SHARE = 0.5
FLOAT_BYTES = 4  # importance runs in float32 (see max_rows_per_pass)


class SizedModel(Protocol):
    """A model that states how much its forward pass keeps for the backward pass."""

    def saved_floats_per_row(self, length: int, length2: int = 0) -> int: ...


def resolve_device(requested: str | None = "auto") -> torch.device:
    """The device of ``runtime.device``: ``auto`` is the GPU when torch sees one, else the CPU.

    Raises:
        RoarError: an unknown name, or ``cuda`` where torch sees no GPU (one line, before any work).
    """
    requested = "auto" if requested is None else requested
    if requested not in DEVICES:
        raise RoarError(f"runtime.device = {requested!r} unknown; allowed: {', '.join(DEVICES)}")
    import torch

    if requested == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if requested == "cuda":
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        raise RoarError(f"runtime.device = cuda but torch.cuda.is_available() is False here (torch "
                        f"{torch.__version__}, {build}); use auto or cpu, or run the stage on a GPU node")
    return torch.device("cpu")


def device_problem(requested: str | None) -> str | None:
    """Why ``runtime.device`` cannot be used on this machine, or None (imports torch only for ``cuda``)."""
    if requested in (None, "auto", "cpu"):
        return None
    try:
        resolve_device(requested)
    except RoarError as error:
        return str(error)
    return None


def free_cuda_bytes(device: torch.device) -> int:
    """Bytes this process can still use on ``device``: the driver's free memory plus what torch's
    caching allocator holds but does not use."""
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def max_rows_per_pass(model: SizedModel, length: int, length2: int = 0, device: torch.device | None = None,
                      free_bytes: int | None = None) -> int:
    """Most sequences of ``length`` (+ ``length2``) tokens that one forward/backward pass of ``model``
    with respect to its input embeddings may take on ``device``.

    CPU (or ``device`` None): :data:`CPU_ROWS`, whatever the model. GPU::

        rows = floor(MEMORY_SHARE * free / (4 B * model.saved_floats_per_row(length, length2)))

    clamped to 1..:data:`MAX_ROWS`, where ``free`` is :func:`free_cuda_bytes` (the model's weights
    are already on the device) unless ``free_bytes`` is given. Importance runs in float32 (4 B):
    the ranking of tokens that decides what is masked hangs on small differences between
    attributions, which bf16's 8-bit mantissa would blur (and IG sums 50 such gradients).

    Worked examples (the models' ``saved_floats_per_row``), a 24 GiB GPU with 23 GiB free
    (``0.5 * 23 * 2**30 = 12,348,030,976 B``):

    - RoBERTa-base (12 layers, d = 768, I = 3072, SDPA attention) at 512 tokens: per token
      ``12 * (10 * 768 + 2 * 3072) + 4 * 768 = 168,960`` floats, per row ``512 * 168,960 * 4 B =
      346,030,080 B`` (330 MiB), so 35 rows (8,192 rows would need 2.6 TiB).
    - BiLSTM-attention (D = 300, H = 128, A = 128) at 50 tokens: per token
      ``16 * 300 + 36 * 128 + 2 * 128 = 9,664`` floats, per row ``50 * 9,664 * 4 B = 1,932,800 B``,
      so 6,388 rows.
    """
    if device is None or device.type != "cuda":
        return CPU_ROWS
    if free_bytes is None:
        free_bytes = free_cuda_bytes(device)
    per_row = FLOAT_BYTES * model.saved_floats_per_row(length, length2)
    return max(1, min(MAX_ROWS, int(MEMORY_SHARE * free_bytes) // max(per_row, 1)))

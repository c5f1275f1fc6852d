"""Which process-group backend a run uses (`--backend auto|nccl|gloo`).

Decided before torch is loaded where the answer is certain: with no GPU driver on the machine
(no NVIDIA, WSL or ROCm device node), CUDA cannot be available, so `auto` is gloo and `nccl` is
refused at once. Loading torch costs seconds, and every flag check runs after this decision.
"""

from __future__ import annotations

import os

from commbench.core.errors import BadInput

# Device nodes a CUDA (or ROCm, which torch also reports as cuda) runtime needs to see a GPU.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")


def gpu_driver_present() -> bool:
    return any(os.path.exists(p) for p in GPU_DEVICE_NODES)


def cuda_gpus() -> int:
    if not gpu_driver_present():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def choose_backend(requested: str) -> str:
    if requested == "auto":
        return "nccl" if cuda_gpus() > 0 else "gloo"
    if requested == "nccl" and cuda_gpus() == 0:
        raise BadInput("--backend nccl needs CUDA GPUs and none is visible here: use --backend gloo")
    return requested

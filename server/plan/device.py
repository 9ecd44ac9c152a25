"""What accelerator this machine has, so the stack picks the right vLLM build."""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from server.settings import Settings


def has_nvidia_gpu() -> bool:
    """True when an NVIDIA driver exposes a device; no CUDA library needs to be imported."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or (
        shutil.which("nvidia-smi") is not None and bool(glob.glob("/proc/driver/nvidia/gpus/*"))
    )


def resolve_device(settings: Settings) -> str:
    """'cuda' or 'cpu': the setting, or what the machine has when it says auto."""
    if settings.device != "auto":
        return settings.device
    return "cuda" if has_nvidia_gpu() else "cpu"


@dataclass(frozen=True)
class DeviceMemory:
    kind: str                 # "cuda" or "cpu"
    name: str
    total_bytes: int
    free_bytes: int
    others: tuple[str, ...] = ()  # other processes holding GPU memory, for messages


def read_cpu_memory(meminfo: str = "/proc/meminfo") -> DeviceMemory:
    values = {}
    for line in Path(meminfo).read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0]) * 1024
    return DeviceMemory("cpu", f"{os.cpu_count()} CPU cores", values["MemTotal"],
                        values.get("MemAvailable", values.get("MemFree", 0)))


def read_gpu_memory(index: int = 0) -> DeviceMemory:
    """Total and free memory of GPU ``index`` through NVML, and who else uses it."""
    import pynvml  # from nvidia-ml-py; only needed on GPU machines

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = usable_memory(pynvml, handle)
        name = pynvml.nvmlDeviceGetName(handle)
        others = []
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = (proc.usedGpuMemory or 0) / 1024**3
            others.append(f"pid {proc.pid} ({_cmdline(proc.pid)}) uses {used:.1f} GiB")
        return DeviceMemory("cuda", name if isinstance(name, str) else name.decode(),
                            memory[0], memory[1], tuple(others))
    finally:
        pynvml.nvmlShutdown()


def usable_memory(pynvml, handle) -> tuple[int, int]:
    """Total and free bytes as CUDA, and so vLLM, sees them: NVML's total counts the memory
    the driver reserves for itself (0.6 GiB of an H200's 140.4), which no process gets."""
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return int(memory.total - memory.reserved), int(memory.free)
    except (AttributeError, pynvml.NVMLError):  # an older driver: its total, reserve and all
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(memory.total), int(memory.free)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80].strip()
    except OSError:
        return "unknown"


def read_memory(device: str) -> DeviceMemory:
    """The memory of ``device`` ('cuda' or 'cpu'), as the planner and pre-flight see it."""
    return read_gpu_memory() if device == "cuda" else read_cpu_memory()

"""The device a profile is measured on, and how the profile names it.

Problem: a device string the user types ('cuda:3', 'mps') may not exist on this machine; the
measurement must fail in one line before any module moves. Method: :func:`resolve_device`
checks with torch; :func:`device_label` adds the GPU's name. Cost: none.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from schedc.errors import ParameterError, literal


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    """'cpu', 'cuda', 'cuda:1', ... -> torch.device, or a SchedcError saying why it cannot be used."""
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ParameterError("device", f"{literal(repr(device))} is not a device torch knows; use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError("device", f"{{name}}{literal(device)}: this torch build or machine has no CUDA device; "
                                 "use {name}cpu")
        count = torch.cuda.device_count()
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= count:
            raise ParameterError("device", f"{{name}}{literal(device)}: only {count} CUDA device(s) here "
                                 f"(cuda:0..cuda:{count - 1})")
        return torch.device("cuda", index)
    if dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ParameterError("device", f"{{name}}{literal(device)}: MPS is not available on this machine")
        return dev
    raise ParameterError("device", f"{{name}}{literal(device)}: only cpu, cuda and mps devices can be profiled")


def dtype_of(modules) -> Optional[str]:
    for m in modules:
        for p in m.parameters():
            return str(p.dtype).replace("torch.", "")
    return None


def device_label(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{dev} ({torch.cuda.get_device_name(dev)})"
    return str(dev)


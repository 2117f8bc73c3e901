"""A run's backbone in the key layout torchvision's and timm's ResNets load (`bayesncl export`).

This package's backbone is torchvision's ResNet with `fc` replaced by an identity, so its state dict is
torchvision's without `fc.*`; timm's ResNet-18/50 name their parameters the same way. The files:

    <out>/backbone.pth          (torchvision, timm) a dict of tensors: torch.load(..., weights_only=True)
    <out>/backbone.safetensors  (safetensors) the same tensors; the run config in its metadata
    <out>/heads.pth|.safetensors  with --heads: projector.* and, for a gated method, gate_head.*
    <out>/config.json           the run config, the format and how to build the network that loads the file

Each loads with `strict=True` into the network `BUILD` describes (docs/USAGE.md, "use a trained backbone
elsewhere"). Every file is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import CheckpointError

if TYPE_CHECKING:
    import torch

FORMATS = ("torchvision", "timm", "safetensors")  # `bayesncl export --format`: the CLI's parser reads it, no torch
STANDARD_WIDTH = 64  # torchvision's and timm's ResNets: other base widths have no network there to load into
# How to build the network the backbone loads into, by library and stem (the CIFAR stem: a 3x3 stride-1 conv1,
# padding model.cifar_padding (released: 2), and no max-pool; docs/METHOD.md section 2).
BUILD = {
    ("torchvision", "imagenet"): "m = torchvision.models.{arch}(); m.fc = torch.nn.Identity()",
    ("torchvision", "cifar"): "m = torchvision.models.{arch}(); m.fc = torch.nn.Identity(); "
                              "m.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding={padding}, "
                              "bias=False); m.maxpool = torch.nn.Identity()",
    ("timm", "imagenet"): "m = timm.create_model('{arch}', num_classes=0)",
    ("timm", "cifar"): "m = timm.create_model('{arch}', num_classes=0); "
                       "m.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding={padding}, bias=False); "
                       "m.maxpool = torch.nn.Identity()",
}


def split(model: torch.nn.Module) -> tuple[dict, dict]:
    """(backbone state dict in torchvision's names, the heads' state dict) of a Method."""
    backbone, heads = {}, {}
    for k, v in model.state_dict().items():
        prefix, _, rest = k.partition(".")
        (backbone if prefix == "backbone" else heads)[rest if prefix == "backbone" else k] = v.detach().cpu()
    return backbone, heads


def _write(tensors: dict, path: Path, fmt: str, metadata: dict) -> Path:
    from ..core.atomic import atomic_path

    with atomic_path(path) as tmp:
        if fmt == "safetensors":
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        else:
            import torch

            torch.save(tensors, tmp)
    return path


def export(checkpoint: str | Path, out: str | Path, fmt: str, heads: bool = False, replace: bool = False) -> list[Path]:
    """Write the backbone of `checkpoint` (a model.pt) in format `fmt` under `out`; returns the files written. A
    folder holding a run, an export of other weights or files no export wrote is refused, or with `replace`
    replaced whole (bayesncl.runs.ownership)."""
    from ..core.atomic import atomic_write_text
    from .files import load_model, weights_digest
    from .ownership import into, other_export

    if fmt not in FORMATS:
        raise CheckpointError(f"--format {fmt!r}: allowed {', '.join(FORMATS)}")
    if fmt == "safetensors":
        try:
            import safetensors.torch  # noqa: F401
        except ImportError:
            raise CheckpointError("--format safetensors needs the safetensors package; pip install safetensors") \
                from None
    model, cfg = load_model(checkpoint)
    m = cfg["model"]
    if fmt != "safetensors" and m["width"] != STANDARD_WIDTH:
        raise CheckpointError(f"checkpoint {checkpoint}: model.width is {m['width']}; {fmt}'s {m['arch']} has base "
                              f"width {STANDARD_WIDTH}, so nothing there loads it (--format safetensors keeps it)")
    backbone, head = split(model)
    out = Path(out)
    ext = "safetensors" if fmt == "safetensors" else "pth"
    libs = ("torchvision", "timm") if fmt == "safetensors" else (fmt,)
    info = {"format": fmt, "arch": m["arch"], "width": m["width"], "stem": m["stem"],
            "cifar_padding": m["cifar_padding"] if m["stem"] == "cifar" else None, "source": str(checkpoint),
            "weights_sha": weights_digest(model), "backbone": f"backbone.{ext}",
            "heads": f"heads.{ext}" if heads else None,
            "build": {lib: BUILD[lib, m["stem"]].format(arch=m["arch"], padding=m["cifar_padding"]) for lib in libs}
            if m["width"] == STANDARD_WIDTH else None}
    meta = {"config": json.dumps(cfg, sort_keys=True), "export": json.dumps(info, sort_keys=True)}
    with into(out, other_export(out, info["weights_sha"]), replace) as where:
        written = [_write(backbone, where / f"backbone.{ext}", fmt, meta)]
        if heads:
            written.append(_write(head, where / f"heads.{ext}", fmt, meta))
        written.append(atomic_write_text(where / "config.json", json.dumps({"config": cfg, "export": info}, indent=2,
                                                                           sort_keys=True) + "\n"))
    return [out / p.name for p in written]

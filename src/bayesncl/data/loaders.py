"""The built-in datasets' loaders, checks and prepared copies on a data config: the adapters bayesncl.settings.registry
names by string (`bayesncl.data.loaders:_load_synthetic`, ...), each calling its dataset's module."""

from __future__ import annotations

from .cifar import check_cifar, load_cifar
from .imageset import ImageSet
from .imagenet import check_imagenet100, load_imagenet100
from .synthetic import load_synthetic, resolve_params
from .waterbirds import check_waterbirds, load_waterbirds


def _load_synthetic(data_cfg: dict, split: str) -> ImageSet:
    return load_synthetic(data_cfg.get("synthetic"), split, data_cfg.get("cache_dir"))


def _check_synthetic(data_cfg: dict) -> None:
    resolve_params(data_cfg.get("synthetic"))  # validates; generation happens at load time


def _load_cifar(data_cfg: dict, split: str) -> ImageSet:
    return load_cifar(data_cfg.get("root"), data_cfg["dataset"], split, download=bool(data_cfg.get("download", False)))


def _check_cifar(data_cfg: dict) -> None:
    check_cifar(data_cfg.get("root"), data_cfg["dataset"], download=bool(data_cfg.get("download", False)))


def _imagenet_sizes(data_cfg: dict) -> tuple[int, int]:
    """(stored side, crop side) of ImageNet-sized images: ImageNet-100's and Waterbirds'."""
    return int(data_cfg.get("imagenet_stored_size", 256)), int(data_cfg.get("imagenet_crop_size", 224))


def _load_imagenet100(data_cfg: dict, split: str) -> ImageSet:
    stored, crop = _imagenet_sizes(data_cfg)
    return load_imagenet100(data_cfg.get("root"), split, stored_size=stored, crop_size=crop,
                            classes=data_cfg.get("classes"), cache_dir=data_cfg.get("cache_dir"))


def _check_imagenet100(data_cfg: dict) -> None:
    check_imagenet100(data_cfg.get("root"), classes=data_cfg.get("classes"))


def _load_waterbirds(data_cfg: dict, split: str) -> ImageSet:
    stored, crop = _imagenet_sizes(data_cfg)
    return load_waterbirds(data_cfg.get("root"), split, image_size=crop, stored_size=stored)


def _check_waterbirds(data_cfg: dict) -> None:
    check_waterbirds(data_cfg.get("root"))


def _folder_sizes(data_cfg: dict) -> dict:
    sizes = data_cfg.get("imagefolder") or {}
    return {"stored_size": int(sizes.get("stored_size", 256)), "crop_size": int(sizes.get("crop_size", 224))}


def _load_imagefolder(data_cfg: dict, split: str) -> ImageSet:
    from .imagefolder import load_imagefolder

    return load_imagefolder(data_cfg.get("root"), split, cache_dir=data_cfg.get("cache_dir"), **_folder_sizes(data_cfg))


def _check_imagefolder(data_cfg: dict) -> None:
    from .imagefolder import check_imagefolder

    check_imagefolder(data_cfg.get("root"))


def _imagefolder_backgrounds(data_cfg: dict) -> bool:
    from pathlib import Path

    from .imagefolder import BACKGROUND_FILE

    return bool(data_cfg.get("root")) and (Path(data_cfg["root"]) / BACKGROUND_FILE).is_file()


def _imagefolder_manifests(data_cfg: dict) -> list[str]:
    from .imagefolder import imagefolder_manifests

    sizes = _folder_sizes(data_cfg)
    return imagefolder_manifests(data_cfg.get("root"), sizes["stored_size"], data_cfg.get("cache_dir"))


def _prepare_imagefolder(data_cfg: dict, workers: int, verify: bool) -> list[str]:
    from .imagefolder import prepare_imagefolder

    done = prepare_imagefolder(data_cfg.get("root"), stored_size=_folder_sizes(data_cfg)["stored_size"],
                               cache_dir=data_cfg.get("cache_dir"), progress=False, workers=workers, verify=verify)
    return [f"{split}: {_state(decoded, verify)}: {manifest}" for split, (manifest, decoded) in done.items()]


def _prepare_imagenet100(data_cfg: dict, workers: int, verify: bool) -> list[str]:
    from .imagenet import PREPARED_SPLITS, make_prepared_dir, prepare_imagenet100, prepared_dir

    d = data_cfg
    make_prepared_dir(prepared_dir(d["root"], d["imagenet_stored_size"], d["classes"], d["cache_dir"]))
    lines = []
    for split in PREPARED_SPLITS:
        manifest, decoded = prepare_imagenet100(d["root"], split, stored_size=d["imagenet_stored_size"],
                                                classes=d["classes"], cache_dir=d["cache_dir"], workers=workers,
                                                verify=verify)
        lines.append(f"{split}: {_state(decoded, verify)}: {manifest}")
    return lines


def _state(decoded, verify: bool) -> str:
    if isinstance(decoded, list):
        return f"repaired {len(decoded)} block(s) that differed from their checksums"
    return "prepared" if decoded else ("already prepared, every block verified" if verify else "already prepared")

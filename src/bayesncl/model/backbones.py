"""torchvision ResNet-18/50 with a CIFAR or ImageNet stem and a configurable base width."""

from __future__ import annotations

import torch.nn as nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

ARCHS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet50": (Bottleneck, [3, 4, 6, 3])}
STEMS = ("cifar", "imagenet")


class ScaledResNet(ResNet):
    """ResNet-18/50 with base width `width` (64 = the standard network).

    The four stages have width, 2, 4 and 8 x width planes; narrow widths (e.g. 16) give CPU-sized
    models with the same topology.
    """

    def __init__(self, arch: str = "resnet18", width: int = 64, stem: str = "cifar", cifar_padding: int = 1):
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r} (model.arch); allowed: {', '.join(ARCHS)}")
        block, layers = ARCHS[arch]
        super().__init__(block, layers)
        # Rebuild every layer at the requested width with torchvision's own block factory.
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, 2 * width, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * width, layers[3], stride=2)
        if stem == "cifar":
            # docs/METHOD.md section 2: 3x3 stride-1 conv, no max-pool; padding model.cifar_padding (released: 2).
            self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=cifar_padding, bias=False)
            self.maxpool = nn.Identity()
        elif stem != "imagenet":
            raise ValueError(f"unknown stem {stem!r} (model.stem); allowed: {', '.join(STEMS)}")
        self.fc = nn.Identity()
        self.out_dim = 8 * width * block.expansion
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)


def build_backbone(arch: str, width: int = 64, stem: str = "cifar", cifar_padding: int = 1) -> ScaledResNet:
    return ScaledResNet(arch, width, stem, cifar_padding)

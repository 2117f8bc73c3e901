"""A backbone of a tenth of ResNet-18's operators, for tests of the training step's structure (the real backbone
runs in its own tests): the `tiny_backbone` fixture (conftest.py) builds every method with it."""

from torch import nn


class TinyBackbone(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
            nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.out_dim = 8

    def forward(self, x):
        return self.net(x)

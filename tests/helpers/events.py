"""A run folder's TensorBoard event files as TensorBoard itself reads them: its Python loader (`EventAccumulator`,
every point kept: what `tensorboard --load_fast=false` runs) and its data server (rustboard, what `tensorboard
--logdir` starts by default), which reads a folder live."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .processes import wait_until

Curves = dict[str, list[tuple[int, float]]]


def accumulator(folder: Path):
    """TensorBoard's Python loader over one run folder, keeping every point (call Reload() to read)."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    return EventAccumulator(str(folder), size_guidance={"tensors": 0})


def series(acc, plugin: str) -> dict[str, list]:
    """{tag: [(step, wall_time, value as an array), ...]} of the loader's series of one plugin ("scalars",
    "histograms": an array of [left edge, right edge, count] rows), in the order it holds them."""
    from tensorboard.util.tensor_util import make_ndarray

    return {tag: [(e.step, e.wall_time, make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if acc.SummaryMetadata(tag).plugin_data.plugin_name == plugin}


def curves(acc) -> Curves:
    """{tag: [(step, value), ...]} of every scalar series the loader holds."""
    return {tag: [(step, float(v)) for step, _, v in points] for tag, points in series(acc, "scalars").items()}


def read(folder: Path) -> Curves:
    acc = accumulator(folder)
    acc.Reload()
    return curves(acc)


class DataServer:
    """TensorBoard's data server (rustboard) over `logdir`, reloading continuously; `curves(run)` asks it over gRPC
    for a run's scalar series as the web page would."""

    def __init__(self, logdir: Path, procs):
        import grpc
        from tensorboard.data.proto import data_provider_pb2_grpc
        from tensorboard_data_server import server_binary

        port_file = logdir.parent / f".{logdir.name}.port"
        self.proc = procs.popen([server_binary(), "--logdir", str(logdir), "--port", "0", "--port-file",
                                 str(port_file), "--reload", "0", "--die-after-stdin"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: port_file.exists() and port_file.read_text().endswith("\n"), "the data server's port",
                   self.proc)
        self.channel = grpc.insecure_channel(f"localhost:{int(port_file.read_text())}")
        self.stub = data_provider_pb2_grpc.TensorBoardDataProviderStub(self.channel)

    def curves(self, run: str) -> Curves:
        from tensorboard.data.proto import data_provider_pb2 as pb

        flt = pb.RunTagFilter(runs=pb.RunFilter(names=[run]))
        got = self.stub.ReadScalars(pb.ReadScalarsRequest(
            plugin_filter=pb.PluginFilter(plugin_name="scalars"), run_tag_filter=flt,
            downsample=pb.Downsample(num_points=10**6)))
        return {t.tag_name: list(zip(t.data.step, t.data.value)) for r in got.runs for t in r.tags}

    def wait_for(self, run: str, ok, what: str) -> Curves:
        """The run's curves once `ok(curves)` holds (the server reloads continuously), or a failure saying `what`."""
        seen = {}

        def shown():
            seen.update(curves=self.curves(run))
            return ok(seen["curves"])

        try:
            wait_until(shown, what, self.proc, limit=30)
        except AssertionError as e:
            raise AssertionError(f"{e}; it showed {seen.get('curves')}") from None
        return seen["curves"]

    def close(self) -> None:
        self.channel.close()
        self.proc.stdin.close()  # --die-after-stdin
        self.proc.wait(timeout=30)

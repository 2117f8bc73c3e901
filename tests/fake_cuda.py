"""Running the GPU path on a machine without a GPU: fake `cuda` tensors (torch's FakeTensorMode: shapes, dtypes,
devices and strides, no data) and a dispatch mode that refuses every operator that would wait for the host or
copy between host and device, with a function mode for the Python-level reads that run no operator on a fake
tensor (print, str, f-strings, NumPy). Used by tests/test_fake_cuda.py (the CUDA-shaped dry run).

What torch 2.14 cannot do here, and the stand-ins used instead:
- the C++ autograd engine calls hasPrimaryContext(0) for a graph with CUDA nodes, which raises without a
  driver: `python_grad` walks the same autograd graph in Python, calling each node's own backward (the very
  kernels the engine would run, seen by the guard); checked against torch.autograd.grad on the CPU.
- autocast disables itself on "cuda" when no GPU is available: `fake_cuda` says one is.
- a CUDA generator needs a driver: `CudaGenerator` is a CPU generator that reports the device "cuda".
- `Module.to` cannot swap a parameter for a fake one: `fake_cuda` replaces each parameter and buffer instead
  (before any optimizer holds them, as everywhere in the package).
- a bf16/fp16 convolution's backend (hence its output's memory format) is chosen from the GPU's properties:
  without one torch picks its slow NCHW kernel; `fake_cuda` picks cuDNN, as on any GPU since sm80.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["READS", "SYNCING", "CudaGenerator", "FakeEvent", "HostSync", "NoHostSync", "fake_cuda",
           "fake_cuda_runtime", "python_backward", "python_grad"]

DEVICE = torch.device("cuda", 0)

# Operators whose CUDA kernels make the host wait for the device, by name (some carry no tag saying so, and an
# operator's `out` overloads lose theirs): what each reads back to the host. repeat_interleave is refused only
# without output_size (given, nothing is read back).
SYNCING = {
    "aten.histc": "its kernel reads the input's min and max back to the host when no range is given",
    "aten.histogram": "bins from the input's range, read on the host",
    "aten._histogramdd_bin_edges": "histogramdd's bins from the input's range, read on the host",
    "aten.bincount": "its output length is the input's max, read back",
    "aten.nonzero": "its output length is the count of nonzeros, read back",
    "aten.argwhere": "its output length is the count of nonzeros, read back",
    "aten.masked_select": "its output length is the mask's count, read back",
    "aten._unique": "its output length is the count of distinct values, read back",
    "aten._unique2": "its output length is the count of distinct values, read back",
    "aten.unique_dim": "its output length is the count of distinct values, read back",
    "aten.unique_consecutive": "its output length is the count of runs, read back",
    "aten.unique_dim_consecutive": "its output length is the count of runs, read back",
    "aten.repeat_interleave": "its output length is the repeats' sum, read back (give output_size)",
    "aten.equal": "returns a host bool",
    "aten.is_nonzero": "returns a host bool",
    "aten.allclose": "returns a host bool",
    "aten._local_scalar_dense": "a device value read on the host (.item(), float(), bool(), .tolist())",
}


# Python-level reads of a device tensor's values that no operator shows on a fake tensor (its repr is
# "FakeTensor(...)", its numpy() a plain error), though on a GPU each copies the values to the host and waits.
# float(), int(), bool() (`if loss > x`), .item() and .tolist() reach aten._local_scalar_dense, refused by name.
READS = {
    torch.Tensor.__repr__: "print, str, repr, %s, logging or a progress bar's postfix of a CUDA tensor",
    torch.Tensor.__format__: "an f-string or format() of a CUDA tensor",
    torch.Tensor.numpy: ".numpy() of a CUDA tensor",
    torch.Tensor.__array__: "NumPy reading a CUDA tensor (np.asarray, np.array)",
}


class HostSync(AssertionError):
    """An operator that waits for the device or copies between host and device, inside a guarded region."""


class NoHostSync(TorchDispatchMode):
    """Refuses, inside its `with` block: the operators of SYNCING (their CUDA kernels read device values back to
    the host) and any other whose result depends on device values read by the host (torch's tags
    data_dependent_output, e.g. _local_scalar_dense behind .item()/float()/bool(), and dynamic_output_shape, e.g.
    boolean-mask indexing); any operator whose tensors or target device are on more than one device type (.cpu(),
    .tolist(), torch.tensor(..., device="cuda") = a host tensor copied over, a CPU tensor mixed into a CUDA op:
    under capture its value would be frozen), except an asynchronous copy (non_blocking) into or out of
    page-locked host memory allocated inside the block (the lagged check's); any operator on host tensors only
    (run once at capture, never replayed); a random operator without an explicit generator (the default
    generators are not the step's: not re-seeded, saved or registered); a convolution whose input and weight
    differ in memory format (channels-last on one side: a layout copy per call). With it, a function mode
    (`_PythonReads`) refuses the Python-level reads of a CUDA tensor of READS (print, str, repr, f-strings, a
    progress bar's postfix, NumPy), which run no operator on a fake tensor.

    `permitted(where)`: a region where the host meets the device by design (an epoch's end reads its sums and
    saves a checkpoint), counted in `permits`; fake tensors hold no values, so a value read there returns 1 (an
    f-string of a 0-dim tensor formats 1, NumPy gets ones).
    `ops` counts the operators seen; `dtypes` maps convolution/matmul names to the dtypes they ran in."""

    MATMULS = ("aten.convolution", "aten.mm", "aten.addmm", "aten.bmm")

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.dtypes: dict[str, set] = {}
        self.permits: dict[str, int] = {}
        self._where: list[str] = []
        self._pinned: list[torch.Tensor] = []  # the page-locked host tensors allocated here
        self._reads: list[_PythonReads] = []  # one function mode per `with` entered

    def __enter__(self):
        self._reads.append(_PythonReads(self).__enter__())
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._reads.pop().__exit__(*exc)

    @contextlib.contextmanager
    def permitted(self, where: str):
        self.permits[where] = self.permits.get(where, 0) + 1
        self._where.append(where)
        try:
            yield
        finally:
            self._where.pop()

    def _async_copy(self, func, args, kwargs) -> bool:
        """copy_(dst, src, non_blocking=True) between the device and page-locked host memory: no wait."""
        if str(func.overloadpacket) != "aten.copy_" or args[2:3] != (True,):  # the dispatcher passes it by position
            return False
        dst, src = args[0], args[1]
        host = dst if dst.device.type == "cpu" else src
        return {dst.device.type, src.device.type} == {"cpu", "cuda"} and any(host is t for t in self._pinned)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        name = str(func.overloadpacket)
        if name == "prim.device":  # a query of where a tensor lives: no work
            return func(*args, **kwargs)
        if self._where:  # by design: the host reads device values here (fake tensors hold none: 1 stands in)
            if name == "aten._local_scalar_dense":
                return True if args[0].dtype == torch.bool else 1
            return func(*args, **kwargs)
        if name in SYNCING and not (name == "aten.repeat_interleave" and kwargs.get("output_size") is not None):
            raise HostSync(f"{func}: {SYNCING[name]} (a host sync)")
        if torch.Tag.data_dependent_output in func.tags or (torch.Tag.dynamic_output_shape in func.tags
                                                           and name != "aten.repeat_interleave"
                                                           and not _integer_index(name, args)):
            raise HostSync(f"{func}: its result needs device values on the host (a host sync)")
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        devices = {t.device.type for t in tensors}
        if kwargs.get("device") is not None:
            devices.add(torch.device(kwargs["device"]).type)
        pinned_alias = name in ("aten.detach", "aten.alias") and any(args[0] is t for t in self._pinned)
        if kwargs.get("pin_memory") or pinned_alias:  # page-locked host memory: an async copy's end on the host
            out = func(*args, **kwargs)
            self._pinned.append(out)
            return out
        if len(devices) > 1 and not self._async_copy(func, args, kwargs):
            raise HostSync(f"{func}: tensors on {sorted(devices)} (a host-device copy or a device mismatch)")
        if devices == {"cpu"} and not self._async_copy(func, args, kwargs):
            raise HostSync(f"{func}: a host tensor (in a CUDA graph this would run once, at capture)")
        if torch.Tag.nondeterministic_seeded in func.tags and kwargs.get("generator") is None:
            raise HostSync(f"{func}: draws from a default generator, not the step's (which is the one re-seeded "
                           "per epoch, saved at a preemption and registered with a captured graph)")
        name = str(func.overloadpacket)
        if name == "aten.convolution":
            x, w = args[0], args[1]
            cl = [t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous() for t in (x, w)]
            nchw = [t.is_contiguous() and not t.is_contiguous(memory_format=torch.channels_last) for t in (x, w)]
            if (cl[0] and nchw[1]) or (nchw[0] and cl[1]):
                raise HostSync(f"{func}: input {'channels-last' if cl[0] else 'NCHW'}, weight "
                               f"{'channels-last' if cl[1] else 'NCHW'} (a layout copy per call)")
        out = func(*args, **kwargs)
        if name in self.MATMULS:
            self.dtypes.setdefault(name, set()).add(out.dtype)
        return out


class _PythonReads(TorchFunctionMode):
    """NoHostSync's view of Python-level calls: a read of READS on a CUDA tensor fails outside the guard's
    permitted regions; inside them it stands in as the guard's operators do (values 1)."""

    def __init__(self, guard: NoHostSync):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in READS or not isinstance(args[0], torch.Tensor) or args[0].device.type != "cuda":
            return func(*args, **kwargs)
        t = args[0]
        if not self.guard._where:
            raise HostSync(f"Tensor.{func.__name__}: {READS[func]} copies its values to the host and waits for "
                           "the device (a host sync)")
        if func is torch.Tensor.__format__ and t.dim() == 0:
            return format(t.item(), *args[1:])
        if func in (torch.Tensor.numpy, torch.Tensor.__array__):
            import numpy as np

            return np.ones(tuple(t.shape), dtype=str(t.dtype).removeprefix("torch."))
        return func(*args, **kwargs)


def _integer_index(name: str, args) -> bool:
    """aten.index with integer indices only: its output has the indices' shape (a boolean mask's is read back)."""
    return name == "aten.index" and all(i is None or i.dtype not in (torch.bool, torch.uint8) for i in args[1])


class FakeEvent:
    """torch.cuda.Event without a driver: recording is free; waiting on it is a host sync, refused by the guard
    `FakeEvent.guard` outside its permitted regions."""

    guard: NoHostSync | None = None

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        if self.guard is not None and not self.guard._where:
            raise HostSync("torch.cuda.Event.synchronize: the host waits for the device")


@contextlib.contextmanager
def fake_cuda_runtime(monkeypatch, guard: NoHostSync):
    """What `pretrain` asks of the CUDA runtime around its steps, without a driver: the current device is 0, peak
    memory reads 0, events are FakeEvents reporting to `guard`. (torch.cuda.is_available stays False: fake
    tensors would then compute their constants on a device that is not there.)"""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: 0)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(FakeEvent, "guard", guard)
    yield


class CudaGenerator(torch.Generator):
    """A CPU generator that reports the device "cuda" (a CUDA generator needs a driver). Fake tensors draw
    nothing, so only its device is read."""

    @property
    def device(self):
        return DEVICE


_REAL_GENERATOR = torch.Generator


class _GeneratorMeta(type):
    def __call__(cls, device="cpu"):
        return CudaGenerator() if torch.device(device).type == "cuda" else _REAL_GENERATOR(device)

    def __instancecheck__(cls, obj):
        return isinstance(obj, _REAL_GENERATOR)


class _Generator(metaclass=_GeneratorMeta):
    """torch.Generator under fake_cuda: torch.Generator(device="cuda") gives a CudaGenerator."""


@contextlib.contextmanager
def fake_cuda(monkeypatch):
    """Fake tensors with CUDA's device, autocast and backward (see the module docstring)."""
    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.autograd, "grad", python_grad)
    monkeypatch.setattr(torch.Tensor, "backward", python_backward)
    monkeypatch.setattr(torch.nn.Module, "to", module_to)
    monkeypatch.setattr(torch, "Generator", _Generator)
    select = torch._C._select_conv_backend

    def conv_backend(x, w, *args, **kwargs):
        b = select(x, w, *args, **kwargs)
        if b == torch._C._ConvBackend.Slow2d and x.device.type == "cuda" and x.dtype in (torch.bfloat16, torch.float16):
            return torch._C._ConvBackend.Cudnn
        return b
    monkeypatch.setattr(torch._C, "_select_conv_backend", conv_backend)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def module_to(self, *args, **kwargs):
    """nn.Module.to for fake tensors: each parameter and buffer replaced by its converted copy."""
    device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)

    def convert(t):
        return t.to(device=device or t.device, dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype,
                    memory_format=memory_format if memory_format is not None and t.ndim == 4 else torch.preserve_format)

    for m in self.modules():
        for n, p in m._parameters.items():
            if p is not None:
                m._parameters[n] = torch.nn.Parameter(convert(p.detach()), requires_grad=p.requires_grad)
        for n, b in m._buffers.items():
            if b is not None:
                m._buffers[n] = convert(b)
    return self


def python_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Tensor.backward by python_grad: every leaf that requires a gradient gets it added to its .grad."""
    leaves, seen, todo = [], set(), [self.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if getattr(node, "variable", None) is not None:
            leaves.append(node.variable)
        todo += [n for n, _ in node.next_functions]
    grads = python_grad(self, leaves, None if gradient is None else [gradient], allow_unused=True)
    for v, g in zip(leaves, grads):
        v.grad = g if v.grad is None else v.grad + g


def python_grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=None,
                **_):
    """torch.autograd.grad(output, inputs) for one scalar output, by walking its autograd graph in reverse
    topological order and calling each node's backward: the engine's work (including the dtype casts and
    sum-to-shape of its validate_outputs) without the engine. A gradient on another device than the input it
    flows into fails, as in the engine."""
    if create_graph:
        raise NotImplementedError("python_grad: create_graph")
    (out,) = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    # Where each input's gradient arrives: a leaf's AccumulateGrad node, else its grad_fn's input slot.
    leaf = {id(t): i for i, t in enumerate(inputs) if t.grad_fn is None}
    slot = {(t.grad_fn, t.output_nr): i for i, t in enumerate(inputs) if t.grad_fn is not None}

    needed, order = {}, []
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 100_000))

    def visit(node) -> bool:  # post-order DFS: whether node leads to an input
        if node is None:
            return False
        if node in needed:
            return needed[node]
        needed[node] = False
        var = getattr(node, "variable", None)
        hit = (var is not None and id(var) in leaf) or any((node, s) in slot for s in range(len(node._input_metadata)))
        for nxt, _ in node.next_functions:
            hit = visit(nxt) or hit
        needed[node] = hit
        order.append(node)
        return hit

    try:
        visit(out.grad_fn)
    finally:
        sys.setrecursionlimit(old)
    result = [None] * len(inputs)
    bufs = {out.grad_fn: [torch.ones_like(out) if grad_outputs is None else grad_outputs[0]]}
    with torch.no_grad():
        for node in reversed(order):
            buf = bufs.pop(node, None)
            if buf is None or not needed[node]:
                continue
            for s, g in enumerate(buf):
                if (node, s) in slot:
                    result[slot[(node, s)]] = g
            var = getattr(node, "variable", None)
            if var is not None:  # AccumulateGrad: captured, never applied (autograd.grad leaves .grad alone)
                if id(var) in leaf:
                    result[leaf[id(var)]] = buf[0]
                continue
            grads = getattr(node, "apply", node)(*buf)  # a custom Function's node: apply; C++ nodes: call
            grads = (grads,) if grads is None or isinstance(grads, torch.Tensor) else tuple(grads)
            for (nxt, nr), g in zip(node.next_functions, grads):
                if nxt is None or g is None or not needed.get(nxt):
                    continue
                meta = nxt._input_metadata[nr]
                if g.device != meta.device:
                    raise HostSync(f"{node.name()}: a gradient on {g.device} flows into {meta.device}")
                if g.dtype != meta.dtype:
                    g = g.to(meta.dtype)
                if tuple(g.shape) != tuple(meta.shape):
                    g = g.sum_to_size(meta.shape)
                b = bufs.setdefault(nxt, [None] * len(nxt._input_metadata))
                b[nr] = g if b[nr] is None else b[nr] + g
    if not allow_unused and any(r is None for r in result):
        raise RuntimeError("python_grad: an input is not reached from the output")
    return tuple(result)

"""Data-parallel training with DistributedDataParallel on synthetic, CIFAR-10-shaped data.

A small end-to-end check that a group can train: gradients are averaged by DDP's all_reduce,
the loss falls, every rank ends with identical weights, and the step time splits into compute
and the communication that compute did not hide.
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from worker.distutil import NoCounter

MODELS = ("linear", "mlp")
INPUT_SHAPE = (3, 32, 32)
IN_FEATURES = 3 * 32 * 32
CLASSES = 10
# Inputs live near a LATENT-dimensional subspace (as images do) and the teacher labels them from
# their latent coordinates, so a few dozen steps of SGD visibly learn the task.
LATENT, NOISE = 32, 0.1
_INIT, _DATA, _TEACHER = 0, 1, 2  # RNG streams


def _seed(seed: int, stream: int) -> int:
    """A generator seed per (seed, stream), so model init, data and teacher never replay one
    stream. Mixed within 32 bits: torch's CPU generator ignores the seed's higher bits."""
    if stream == _INIT:
        return seed
    return (seed * 2_654_435_761 + stream * 0x9E3779B9) % (1 << 32)


def build_model(model: str) -> nn.Module:
    if model == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(IN_FEATURES, CLASSES))
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(IN_FEATURES, 512), nn.ReLU(),
                             nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES))
    raise ValueError(f"model: unknown model {model!r} (expected one of {', '.join(MODELS)})")


def _validate(model, steps, batch_size, lr) -> None:
    if model not in MODELS:
        raise ValueError(f"model: unknown model {model!r} (expected one of {', '.join(MODELS)})")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError("steps: must be at least 1")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError("batch_size: must be at least 1")
    if not isinstance(lr, (int, float)) or not lr > 0 or math.isinf(lr):
        raise ValueError("lr: must be a positive, finite number")


class _Clock:
    """Time stamps on the device's timeline: CUDA events on GPU, perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream: after the work queued on it so far
        return event

    def ms(self, a, b) -> float:
        """Milliseconds from mark a to mark b (both must have happened)."""
        if not self.cuda:
            return (b - a) * 1e3
        b.synchronize()
        return a.elapsed_time(b)


class _CommTimer:
    """State of the timing comm hook: DDP's default allreduce, with a mark when each bucket is
    handed to it (the backward pass has produced the bucket's gradients) and one when its
    reduction has completed.

    Timing (CUDA events on GPU, perf_counter on CPU), per step, data generation excluded:
    step = zero_grad + forward + backward (with DDP's gradient all_reduce) + optimizer step.
    DDP overlaps the all_reduce of each gradient bucket with the rest of the backward pass, so
    communication time cannot simply be subtracted. A comm hook wraps DDP's default allreduce
    hook (same reduction, same buckets, overlap kept) and marks when each bucket is handed over
    and when its reduction completes. comm = the exposed communication: from the hand-off of
    the last bucket (the end of gradient computation) until the last reduction completes,
    i.e. the part of the step spent only waiting for the network; compute = step - comm
    (forward, backward, the optimizer, DDP's own bookkeeping, and any communication hidden
    under them). Where the gradients fit one bucket (the linear model), comm is the whole
    all_reduce. The hook runs in Python, which costs host time that DDP's built-in C++
    allreduce does not: on 2 H200s with these tiny, host-bound models about 0.2 ms a step
    (1.27 against 1.06 ms for linear at batch 256, where a step without DDP takes 0.47 ms). Means exclude the first step (DDP rebuilds its buckets then)
    unless it is the only one, and are averaged over ranks.
    """

    def __init__(self, clock: _Clock, group, counter):
        self.clock, self.group, self.counter = clock, group, counter
        self.launched: list = []
        self.completed: list = []

    def reset(self) -> None:
        self.launched, self.completed = [], []

    def exposed_ms(self) -> float:
        """Communication the backward pass could not hide: from the last bucket's hand-off
        (its gradients are the last ones computed) to the last reduction's completion."""
        if not self.launched:
            return 0.0
        last = self.launched[-1]
        return max([0.0, *(self.clock.ms(last, done) for done in self.completed)])


def _timed_allreduce_hook(state, bucket):
    # No annotations: DDP checks them against dist.GradBucket / Future, and this module's
    # postponed (string) annotations would fail that check.
    state.launched.append(state.clock.mark())
    state.counter.value += 1
    fut = default_hooks.allreduce_hook(state.group, bucket)

    def done(f):
        # gloo: runs on gloo's thread when the all_reduce finishes. NCCL: runs on streams that
        # wait for the all_reduce, so the event lands when it finishes on the device.
        state.completed.append(state.clock.mark())
        return f.value()

    return fut.then(done)


def _max_param_diff(params: list[torch.Tensor]) -> float:
    """max |p - p on rank 0| over every parameter element and every rank."""
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    diff = (flat - ref).abs().max().double().reshape(1)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff.item())


def train(model: str, *, steps: int, batch_size: int, lr: float, seed: int, device,
          counter=None, on_step=None) -> dict:
    """Train `model` ("linear" or "mlp", on flattened 3x32x32 inputs, 10 classes) with DDP and
    SGD(lr) for `steps` steps of `batch_size` samples per rank. Call on every rank.

    Initialisation: each rank seeds its model init with seed + rank, so the ranks build
    different weights; DDP broadcasts rank 0's at construction (rank 0's init, from `seed`,
    wins), and that is verified before training (RuntimeError if any rank differs).

    Data, fresh every step and different per rank (a generator seeded from seed + rank):
    latent z ~ N(0, I_32), input = z @ B + 0.1 * N(0, I) reshaped to 3x32x32 (about unit
    variance per pixel), label = argmax(z @ T). B and T are a fixed random "teacher", the
    same on every rank (seeded from seed), so there is something to learn and the loss falls
    within a few dozen steps.

    Timing: see _CommTimer (step, exposed communication, compute).

    The loss of each step is reduced to rank 0 (dist.reduce, then / world size), which calls
    on_step(step, loss) if given; the list is broadcast at the end so every rank returns the
    same dict. `counter` grows by one per bucket all_reduce and per loss reduce.
    """
    _validate(model, steps, batch_size, lr)
    device = torch.device(device)
    rank, n = dist.get_rank(), dist.get_world_size()
    counter = counter if counter is not None else NoCounter()
    clock = _Clock(device)
    ddp, params, timer, opt = _setup(model, seed + rank, lr, device, clock, counter)
    batches = _Batches(seed, rank, batch_size, device)

    step_ms, comm_ms, losses = [], [], []
    for step in range(steps):
        x, y = batches.next()
        timer.reset()
        start = clock.mark()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        end = clock.mark()
        step_ms.append(clock.ms(start, end))
        comm_ms.append(timer.exposed_ms())

        total = loss.detach().clone()
        dist.reduce(total, dst=0)
        counter.value += 1
        if rank == 0:
            value = total.item() / n
            losses.append(value)
            if on_step is not None:
                on_step(step, value)
    return _summary(model, steps, batch_size, lr, step_ms, comm_ms, losses, params, device)


def _setup(model: str, init_seed: int, lr: float, device, clock: _Clock, counter):
    """The DDP model (rank 0's initial weights everywhere, verified), its timing hook, SGD."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG as it was
        torch.manual_seed(_seed(init_seed, _INIT))
        net = build_model(model).to(device)
    ddp_kwargs = {}
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        ddp_kwargs["device_ids"] = [index]
    ddp = DistributedDataParallel(net, **ddp_kwargs)  # broadcasts rank 0's parameters
    params = list(ddp.parameters())
    if _max_param_diff(params) != 0.0:
        raise RuntimeError("DDP did not give every rank rank 0's initial parameters")
    timer = _CommTimer(clock, None, counter)
    ddp.register_comm_hook(timer, _timed_allreduce_hook)
    return ddp, params, timer, torch.optim.SGD(ddp.parameters(), lr=lr)


class _Batches:
    """Synthetic batches: a teacher shared by every rank, data of this rank's own."""

    def __init__(self, seed: int, rank: int, batch_size: int, device) -> None:
        teacher_gen = torch.Generator(device=device).manual_seed(_seed(seed, _TEACHER))
        self.basis = torch.randn(LATENT, IN_FEATURES, generator=teacher_gen, device=device) / LATENT ** 0.5
        self.teacher = torch.randn(LATENT, CLASSES, generator=teacher_gen, device=device)
        self.gen = torch.Generator(device=device).manual_seed(_seed(seed + rank, _DATA))
        self.batch_size, self.device = batch_size, device

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        b, dev = self.batch_size, self.device
        z = torch.randn(b, LATENT, generator=self.gen, device=dev)
        noise = torch.randn(b, IN_FEATURES, generator=self.gen, device=dev)
        x = (z @ self.basis + NOISE * noise).reshape(b, *INPUT_SHAPE)
        return x, (z @ self.teacher).argmax(dim=1)


def _summary(model, steps, batch_size, lr, step_ms, comm_ms, losses, params, device) -> dict:
    """The result dict, the same on every rank (one all_reduce carries losses and means)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    param_diff = _max_param_diff(params)
    timed = slice(1, None) if steps > 1 else slice(None)
    step_mean = sum(step_ms[timed]) / len(step_ms[timed])
    comm_mean = sum(comm_ms[timed]) / len(comm_ms[timed])
    # One sum: rank 0's losses (zeros elsewhere) and every rank's means / n.
    summary = torch.zeros(steps + 2, dtype=torch.float64, device=device)
    if rank == 0:
        summary[:steps] = torch.tensor(losses, dtype=torch.float64)
    summary[steps:] = torch.tensor([step_mean / n, comm_mean / n], dtype=torch.float64)
    dist.all_reduce(summary)
    values = summary.tolist()
    step_mean, comm_mean = values[steps], values[steps + 1]
    return {
        "model": model, "steps": steps, "batch_size": batch_size, "lr": lr, "world_size": n,
        "loss": values[:steps], "step_time_ms": step_mean, "compute_ms": step_mean - comm_mean,
        "comm_ms": comm_mean, "comm_share": comm_mean / step_mean if step_mean > 0 else 0.0,
        "samples_per_s": batch_size * n / (step_mean / 1e3) if step_mean > 0 else 0.0,
        "param_max_abs_diff": param_diff, "params": sum(p.numel() for p in params),
    }

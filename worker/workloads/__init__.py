"""Workloads beyond the single-collective sweep: point-to-point ping-pong, gradient averaging
(on device against host-staged) and data-parallel training.

Each workload module holds pure functions that an executor calls on every rank of an already
initialised default process group (NCCL on GPU, gloo on CPU). Like worker.collectives they take
`device` (a torch.device or its name) and an optional `counter` whose int `.value` grows by one
per communication op this rank issues, so a supervisor sees progress and a stall names its rank.
"""

"""The per-device worker daemon and the executor process that runs torch.distributed."""

"""Fleet health: verdicts, sweeps, baselines, localization planner and driver, node taints."""

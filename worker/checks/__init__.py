"""The fleet health checks' runners, one module per kind (specs: ringleader/checks.py; verdicts:
coordinator/health/fleet.py). Each runner is called on every rank of the check's process group with
(ValidJob, RunContext) and returns an Outcome whose message is the same on every rank."""

"""The checks' judging, pure: from figures to a check's result with its flags. The worker uses
it to decide what to measure again; the coordinator (coordinator/health/assemble.py) builds the
result that verdicts are drawn from, out of every rank's own evidence."""

"""The laboratory stays out of the house: bench/ holds code that runs, results are small tables
under docs/results/, and raw runs (logs, archives, profiles) stay out of git (bench/out/ is ignored).
Read from what git tracks, so an untracked scratch folder never fails it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH_MAX_BYTES = 2_000_000
RESULTS_MAX_BYTES = 1_500_000
RESULT_FILE_MAX_BYTES = 64_000
ARCHIVES = (".tar", ".gz", ".tgz", ".txz", ".xz", ".bz2", ".zst", ".zip", ".7z", ".patch", ".diff")


def tracked(*paths: str) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def test_bench_is_code_under_two_megabytes():
    files = tracked("bench")
    assert files, "bench/ tracks nothing: the maintained benches are gone"
    assert size(files) < BENCH_MAX_BYTES, sorted(
        ((f.stat().st_size, str(f.relative_to(ROOT))) for f in files), reverse=True)[:10]


def test_no_archive_or_patch_is_tracked():
    found = [str(f.relative_to(ROOT)) for f in tracked(".") if f.name.lower().endswith(ARCHIVES)]
    assert not found, f"archives and patches belong in bench/out/ (git-ignored), not in git: {found}"


def test_results_are_small_tables():
    files = tracked("docs/results")
    assert size(files) < RESULTS_MAX_BYTES
    big = [str(f.relative_to(ROOT)) for f in files if f.stat().st_size > RESULT_FILE_MAX_BYTES]
    assert not big, f"raw runs belong in bench/out/ (git-ignored): {big}"
    kinds = {f.suffix for f in files}
    assert kinds <= {".md", ".json", ".txt"}, f"only tables under docs/results/: {kinds}"


def test_raw_run_folder_is_ignored():
    probe = "bench/out/2026-01-01-anything/run.tgz"
    rc = subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT).returncode
    assert rc == 0, "bench/out/ must be git-ignored: raw runs are written there"

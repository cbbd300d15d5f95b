#!/usr/bin/env python3
"""Regenerate the checked-in gRPC stubs (and .pyi) from proto/. `--check` fails when stale.

Settings live in pyproject.toml under [tool.ringleader.genproto]. The generator is pinned
(grpcio-tools==1.84.0) so the generated code imports on grpcio 1.84.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(out_dir: Path, cfg: dict) -> list[Path]:
    from grpc_tools import protoc  # dev dependency

    proto_root = ROOT / cfg["proto_root"]
    # The mypy plugin is installed beside this interpreter, which may not be on PATH.
    plugin = Path(sys.executable).with_name("protoc-gen-mypy")
    args = [
        "protoc", f"-I{proto_root}", f"--plugin=protoc-gen-mypy={plugin}", f"--python_out={out_dir}", f"--mypy_out={out_dir}",
        f"--grpc_python_out={out_dir}", *[str(proto_root / p) for p in cfg["protos"]],
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    return sorted(p.relative_to(out_dir) for p in out_dir.rglob("*_pb2*.py*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if checked-in stubs are stale")
    args = parser.parse_args()
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ringleader"]["genproto"]
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp), cfg)
        stale = [f for f in files if not (ROOT / cfg["out"] / f).exists()
                 or not filecmp.cmp(Path(tmp) / f, ROOT / cfg["out"] / f, shallow=False)]
        if args.check:
            if stale:
                sys.exit("stale gRPC stubs, run scripts/genproto.py: " + ", ".join(map(str, stale)))
            print(f"gRPC stubs up to date ({len(files)} files)")
            return
        for f in files:
            dest = ROOT / cfg["out"] / f
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / f, dest)
            print("wrote", dest.relative_to(ROOT))


if __name__ == "__main__":
    main()

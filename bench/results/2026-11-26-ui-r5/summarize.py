"""The tables of README.md from the JSON files in runs/ (bench/first_render.py's output).
    python bench/results/2026-11-26-ui-r5/summarize.py [GROUP_PREFIX ...]

A run's group is its file name without the trailing "-N.json" (e.g. "ab-new"), with its commit."""

import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def row(name: str, d: dict, load: dict) -> dict:
    p = load["page"]
    files = [r for r in p["resources"] if r["url"].startswith("/static/")]
    fleet = [r for r in p["resources"] if "fleet?since=0" in r["url"]]
    return {"file": name, "commit": d["commit"], "load1": round(load["loadavg_before"][0], 1),
            "first_render": round(load["first_render_s"] * 1000), "html_end": round(p["nav"]["responseEnd"]),
            "files_first_byte": round(statistics.median(r["first_byte"] for r in files)),
            "scripts_in": round(max(r["end"] for r in files)),
            "fleet_asked": round(fleet[0]["request"]), "fleet_first_byte": round(fleet[0]["first_byte"]),
            "fleet_in": round(fleet[0]["end"]), "drawn": round(p["marks"]["fleet:first-drawn"]),
            "fleet_requests": len(fleet), "renderer_cpu_ms": round(1000 * load.get("chromium_cpu_s", {}).get("renderer", 0))}


def main() -> None:
    rows = []
    for f in sorted(glob.glob(os.path.join(HERE, "runs", "*.json"))):
        name = os.path.basename(f)
        if len(sys.argv) > 1 and not name.startswith(tuple(sys.argv[1:])):
            continue
        d = json.load(open(f))
        rows += [row(name, d, ld) for ld in d["loads"]]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    print()
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['file'].rsplit('-', 1)[0]} {r['commit']}", []).append(r)
    for g, rs in groups.items():
        med = lambda k: round(statistics.median(r[k] for r in rs))  # noqa: E731
        fr = [r["first_render"] for r in rs]
        print(f"{g}: {len(rs)} loads, load {min(r['load1'] for r in rs)}-{max(r['load1'] for r in rs)}; "
              f"first render median {med('first_render')} ms ({min(fr)}-{max(fr)}), under 500 ms: {sum(v < 500 for v in fr)}; "
              f"medians (ms from navigation): HTML end {med('html_end')}, files' first byte {med('files_first_byte')}, "
              f"scripts in {med('scripts_in')}, fleet asked {med('fleet_asked')}, its first byte {med('fleet_first_byte')}, "
              f"in {med('fleet_in')}, drawn {med('drawn')}; renderer CPU during the load {med('renderer_cpu_ms')} ms; "
              f"fleet requests per load {sorted({r['fleet_requests'] for r in rs})}")


if __name__ == "__main__":
    main()

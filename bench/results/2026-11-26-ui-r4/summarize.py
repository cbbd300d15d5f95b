"""The tables of README.md from the JSON files here (bench/first_render.py's output).
    python bench/results/2026-11-26-ui-r4/summarize.py"""

import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def row(name: str, d: dict, load: dict) -> dict:
    p = load["page"]
    files = [r for r in p["resources"] if r["url"].startswith("/static/")]
    fleet = next(r for r in p["resources"] if "fleet?since=0" in r["url"])
    return {"file": name, "commit": d["commit"], "settle": d.get("settle_s", 0), "load1": round(load["loadavg_before"][0], 1),
            "first_render": round(load["first_render_s"] * 1000), "html_end": round(p["nav"]["responseEnd"]),
            "files_first_byte": round(statistics.median(r["first_byte"] - r["request"] for r in files)),
            "fleet_asked": round(fleet["request"]), "fleet_first_byte": round(fleet["first_byte"] - fleet["request"]),
            "fleet_in": round(fleet["end"]), "drawn": round(p["marks"]["fleet:first-drawn"]),
            "jobs_row": round(p["jobs_row_ms"] or 0), "reloads": load.get("reloads_s", []),
            "renderer_cpu_s": load.get("chromium_cpu_s", {}).get("renderer"), "coordinator_cpu_s": load["coordinator_cpu_s"]}


def main() -> None:
    rows = []
    for f in sorted(glob.glob(os.path.join(HERE, "ab", "*.json"))):
        d = json.load(open(f))
        rows += [row(os.path.basename(f), d, ld) for ld in d["loads"]]
    keys = list(rows[0])[:-4]
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r[k]) for k in keys))
    print()
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['file'].rsplit('-', 2)[0]} {r['commit']}", []).append(r)
    for g, rs in groups.items():
        med = lambda k: round(statistics.median(r[k] for r in rs))
        reloads = [x for r in rs for x in r["reloads"]]
        print(f"{g}: {len(rs)} loads, load {min(r['load1'] for r in rs)}-{max(r['load1'] for r in rs)}; first render median {med('first_render')} ms "
              f"({min(r['first_render'] for r in rs)}-{max(r['first_render'] for r in rs)}), under 500 ms: {sum(r['first_render'] < 500 for r in rs)}; "
              f"medians: files' first byte {med('files_first_byte')}, fleet asked {med('fleet_asked')}, its first byte after {med('fleet_first_byte')}, "
              f"drawn {med('drawn')}, first job row {med('jobs_row')}"
              + (f"; reloads median {round(statistics.median(reloads) * 1000)} ms ({round(min(reloads) * 1000)}-{round(max(reloads) * 1000)})" if reloads else ""))


if __name__ == "__main__":
    main()

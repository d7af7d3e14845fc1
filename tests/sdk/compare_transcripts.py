"""Compares the thread-stream transcripts that test_thread_stream.py writes for Fawn and for
the official server (`FAWN_SDK_TRANSCRIPTS=DIR`, one run against each), case by case.

    python3 tests/sdk/compare_transcripts.py DIR

Each event is reduced to its shape — method, namespace (ids masked), and what kind of data
it carries (a message event's kind and block type, a lifecycle status, a tool event, the
keys of a values snapshot, an update's node, …) — and runs of the same shape are counted,
so token-level differences (how many deltas a model streams) do not drown the rest. The
two sequences are then diffed. Standard library only.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path

ID = re.compile(r":[0-9A-Za-z_-]{6,}")


def mask(ns: list[str]) -> str:
    return "/".join(ID.sub(":*", s) for s in ns)


def shape(ev: dict) -> str:
    method = ev.get("method", ev.get("type"))
    p = ev.get("params") or {}
    d = p.get("data")
    ns = mask(p.get("namespace") or [])
    where = f"[{ns}]" if ns else ""
    if method == "messages" and isinstance(d, dict):
        kind = d.get("event")
        block = (d.get("content") or d.get("delta") or {}).get("type", "")
        extra = f" role={d.get('role')}" if kind == "message-start" else ""
        return f"messages{where} {kind} {block}{extra}".rstrip()
    if method == "lifecycle" and isinstance(d, dict):
        return f"lifecycle{where} {d.get('event')}"
    if method == "tools" and isinstance(d, dict):
        return f"tools{where} {d.get('event')} {d.get('tool_name', '')}".rstrip()
    if method == "values" and isinstance(d, dict):
        return f"values{where} keys={','.join(sorted(d))}"
    if method == "updates" and isinstance(d, dict):
        return f"updates{where} node={p.get('node') or d.get('node')}"
    if method == "input.requested" and isinstance(d, dict):
        return f"input.requested{where} data={','.join(sorted(d))}"
    if method == "checkpoints" and isinstance(d, dict):
        return f"checkpoints{where} source={d.get('source')}"
    if method == "tasks" and isinstance(d, dict):
        return f"tasks{where} {'result' if 'result' in d else 'start'} {d.get('name')}"
    if method == "custom" and isinstance(d, dict):
        payload = d.get("payload")
        kind = payload.get("type") if isinstance(payload, dict) else type(payload).__name__
        return f"custom{where} {kind}"
    return f"{method}{where}"


def collapse(shapes: list[str]) -> list[str]:
    out: list[str] = []
    count = 0
    for i, s in enumerate(shapes):
        count += 1
        if i + 1 == len(shapes) or shapes[i + 1] != s:
            out.append(s if count == 1 else f"{s} ×{count}")
            count = 0
    return out


def envelope_keys(events: list[dict]) -> set[str]:
    keys: set[str] = set()
    for ev in events:
        keys.update(ev)
        keys.update(f"params.{k}" for k in ev.get("params") or {})
    return keys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    d = Path(argv[1])
    cases = sorted({p.name.split("-", 1)[1] for p in d.glob("*.json")})
    for case in cases:
        fawn, official = d / f"fawn-{case}", d / f"official-{case}"
        if not (fawn.exists() and official.exists()):
            print(f"== {case}: only {'fawn' if fawn.exists() else 'official'}\n")
            continue
        a = json.loads(official.read_text())
        b = json.loads(fawn.read_text())
        print(f"== {case}: official {len(a)} events, fawn {len(b)} events")
        ka, kb = envelope_keys(a), envelope_keys(b)
        if ka != kb:
            print(f"   envelope keys only official: {sorted(ka - kb)}; only fawn: {sorted(kb - ka)}")
        diff = difflib.unified_diff(
            collapse([shape(e) for e in a]),
            collapse([shape(e) for e in b]),
            "official",
            "fawn",
            n=1,
            lineterm="",
        )
        for line in diff:
            print("   " + line)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

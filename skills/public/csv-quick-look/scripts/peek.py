#!/usr/bin/env python3
"""Profile a CSV/TSV file: shape, column types, missing values, statistics, sample rows.

Standard library only. Usage:
    peek.py FILE [--rows N] [--delimiter D] [--max-rows N]
"""

import argparse
import csv
import math
import re
import sys
from collections import Counter

MISSING = {"", "na", "n/a", "nan", "null", "none", "-"}
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?")
BOOLS = {"true", "false", "yes", "no"}


def kind_of(value):
    v = value.strip()
    if v.lower() in MISSING:
        return None
    if re.fullmatch(r"[+-]?\d+", v):
        return "integer"
    try:
        f = float(v.replace(",", "")) if re.fullmatch(r"[+-]?[\d,]*\.?\d+([eE][+-]?\d+)?", v) else None
    except ValueError:
        f = None
    if f is not None and math.isfinite(f):
        return "number"
    if DATE_RE.match(v):
        return "date"
    if v.lower() in BOOLS:
        return "boolean"
    return "text"


def to_number(value):
    try:
        return float(value.strip().replace(",", ""))
    except ValueError:
        return None


class Column:
    def __init__(self, name):
        self.name = name
        self.kinds = Counter()
        self.missing = 0
        self.values = Counter()
        self.distinct_capped = False
        self.nums = []

    def add(self, value):
        k = kind_of(value)
        if k is None:
            self.missing += 1
            return
        self.kinds[k] += 1
        if len(self.values) < 10000 or value in self.values:
            self.values[value.strip()] += 1
        else:
            self.distinct_capped = True
        if k in ("integer", "number"):
            n = to_number(value)
            if n is not None:
                self.nums.append(n)

    def kind(self):
        if not self.kinds:
            return "empty"
        if set(self.kinds) <= {"integer", "number"}:
            return "number" if "number" in self.kinds else "integer"
        top, count = self.kinds.most_common(1)[0]
        total = sum(self.kinds.values())
        return top if count == total else f"mixed ({top} {100 * count // total}%)"


def sniff(path, forced):
    if forced:
        return forced
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        head = f.read(64 * 1024)
    try:
        return csv.Sniffer().sniff(head, delimiters=",;\t|").delimiter
    except csv.Error:
        return "\t" if head.count("\t") > head.count(",") else ","


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--delimiter")
    ap.add_argument("--max-rows", type=int, default=200000)
    args = ap.parse_args()

    delim = sniff(args.file, args.delimiter)
    with open(args.file, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter=delim)
        try:
            header = next(reader)
        except StopIteration:
            print("The file is empty.")
            return 0
        cols = [Column(h.strip() or f"column_{i + 1}") for i, h in enumerate(header)]
        samples, rows, ragged, truncated = [], 0, 0, False
        for row in reader:
            if rows >= args.max_rows:
                truncated = True
                break
            rows += 1
            if len(row) != len(cols):
                ragged += 1
            for i, col in enumerate(cols):
                col.add(row[i] if i < len(row) else "")
            if len(samples) < args.rows:
                samples.append(row)

    shown_delim = {"\t": "TAB", ",": "comma", ";": "semicolon", "|": "pipe"}.get(delim, repr(delim))
    print(f"# {args.file}")
    print(f"rows: {rows}{'+ (stopped at --max-rows)' if truncated else ''}, columns: {len(cols)}, delimiter: {shown_delim}")
    if ragged:
        print(f"warning: {ragged} rows have a different number of fields than the header")
    print()
    print("| column | type | missing | distinct | summary |")
    print("|---|---|---|---|---|")
    for c in cols:
        distinct = f"{len(c.values)}{'+' if c.distinct_capped else ''}"
        if c.nums:
            mean = sum(c.nums) / len(c.nums)
            summary = f"min {min(c.nums):g}, max {max(c.nums):g}, mean {mean:.4g}"
        else:
            top = ", ".join(f"{v[:20]} ({n})" for v, n in c.values.most_common(3))
            summary = f"top: {top}" if top else ""
        missing = f"{c.missing} ({100 * c.missing // rows if rows else 0}%)"
        print(f"| {c.name} | {c.kind()} | {missing} | {distinct} | {summary} |")
    print()
    print(f"## First {len(samples)} rows")
    print("| " + " | ".join(c.name for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for row in samples:
        cells = [(row[i] if i < len(row) else "").replace("|", "\\|")[:40] for i in range(len(cols))]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

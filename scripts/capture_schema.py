"""Write analysis/capture_types.json: the JSON types each field of a
capture has, and the fields the readers index without a default, as
seen in a corpus of real captures (the test suite's and the bench's):

    .venv/bin/python scripts/capture_schema.py DIR... [--out analysis/capture_types.json]

Every profile.json under the DIRs that the Profile accepts is read. A
field is a path of keys, `[]` for a list's items and `*` for a key that
is data (a thread id, a stage or function name). Its types are those it
had anywhere in the corpus. It is required where every capture that has
its parent has it too, and some reader indexes it by name (`x["key"]`):
a capture without it would crash that reader. schema_check.check_types
holds captures to this, so a field of a type no capture ever had is one
line naming it (exit 7), not a reporter's TypeError. Review the diff: a
type or a required field appears only where the corpus shows it."""

from __future__ import annotations

import argparse
import ast
import json
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READERS = ("analysis", "flamegraphs", "probes", "mysqlprobe/reports.py", "mysqlprobe/commands")


def indexed_keys() -> set[str]:
    """Every string a reader subscripts with: x["key"]."""
    out: set[str] = set()
    for where in READERS:
        base = ROOT / where
        for path in ([base] if base.is_file() else sorted(base.rglob("*.py"))):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                        and isinstance(node.slice.value, str):
                    out.add(node.slice.value)
    return out


def main() -> None:
    from mysqlprobe.analysis.model import Profile
    from mysqlprobe.analysis.schema_check import check_numbers, field_of, json_type, parent_of, recorded, upgraded, walk
    from mysqlprobe.capture import read_profile

    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", default=str(ROOT / "analysis" / "capture_types.json"))
    args = ap.parse_args()
    types: dict[str, set[str]] = defaultdict(set)
    objects: Counter[str] = Counter()   # field -> the objects seen there
    has: Counter[str] = Counter()       # field -> the objects at its parent that had it
    used = 0
    for d in args.dirs:
        for p in sorted(Path(d).rglob("profile.json")):
            try:
                doc = read_profile(str(p))
                Profile(doc, recorded_here=True)   # its shape: the types are what this learns
                check_numbers(upgraded(doc))
            except Exception:   # noqa: BLE001 - a document a test made to be refused is no example
                continue
            used += 1
            for path, value in walk(recorded(upgraded(doc))):
                field = field_of(path)
                types[field].add(json_type(value))
                if isinstance(value, dict):
                    objects[field] += 1
                    has.update({field_of(path + (str(k),)) for k in value})
    keys = indexed_keys()
    required = sorted(f for f in types if not f.endswith("*") and f.rpartition(".")[2] in keys
                      and objects[parent_of(f)] >= 20 and has[f] == objects[parent_of(f)])
    out = {"corpus": used, "types": {f: sorted(t) for f, t in sorted(types.items())}, "required": required}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {len(types)} fields, {len(required)} required, from {used} captures")


if __name__ == "__main__":
    main()

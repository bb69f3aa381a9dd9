"""Write the test goldens again from what the code prints now, for a person
to review with `git diff tests/golden` before committing. No test writes a
golden: a test only compares.

    .venv/bin/python scripts/update_goldens.py

Each golden is made by the same builder its test uses (tests/unit)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from mysqlprobe import capture  # noqa: E402
from mysqlprobe.analysis.html_report import render_html  # noqa: E402
from mysqlprobe.analysis.model import Profile  # noqa: E402
from mysqlprobe.analysis.report import render_text  # noqa: E402
from mysqlprobe.collectors.cpu.perf import fold_script  # noqa: E402
from mysqlprobe.flamegraphs import folded  # noqa: E402


def folded_text(stacks) -> str:
    out = io.StringIO()
    folded.write(stacks, out)
    return out.getvalue()


def goldens() -> dict[str, str]:
    import test_folded
    import test_perf
    import test_report
    out = {"stacks.folded": folded_text(test_folded._sample()),
           "report_insert_profile.txt": render_text(Profile(test_report.synthetic_run()))}
    with open(FIXTURES / "perf_script.txt") as f:
        out["perf_stacks.folded"] = folded_text(fold_script(f, test_perf.NAMES)[0])
    for name in ("exact", "sampled"):
        doc = capture.read_profile(str(FIXTURES / f"profile_v1_{name}.json"))
        out[f"report_v1_{name}.txt"] = render_text(Profile(doc))
        if name == "exact":
            out["report_v1_exact.html"] = render_html(Profile(doc))
    return out


def main() -> int:
    changed = []
    for name, text in goldens().items():
        path = GOLDEN / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    print(f"rewrote {', '.join(changed)}: review with git diff tests/golden" if changed else "every golden as it was")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The reporters read the Profile and its typed views, not the capture's
document: no function in analysis/ or flamegraphs/ takes the document,
but those that check and upgrade it and the views that are made from it
(analysis/views.py's `of`, the Profile's own constructor)."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
# (module, function): the readers of the raw document by design
ALLOWED = {("schema_check", "check_document"), ("schema_check", "check_numbers"), ("schema_check", "check_types"),
           ("schema_check", "recorded"),
           ("schema_check", "walk"), ("schema_check", "upgraded"), ("model", "__init__"),
           ("views", "of")}


def document_takers() -> list[tuple[str, str, int]]:
    out = []
    for folder in ("analysis", "flamegraphs"):
        for path in sorted((ROOT / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names = {a.arg for a in node.args.args + node.args.kwonlyargs}
                    if "doc" in names and (path.stem, node.name) not in ALLOWED:
                        out.append((f"{folder}/{path.name}", node.name, node.lineno))
    return out


def test_no_reporter_takes_the_document():
    assert document_takers() == []


def test_the_check_sees_a_function_that_takes_it(tmp_path, monkeypatch):
    (tmp_path / "analysis").mkdir()
    (tmp_path / "flamegraphs").mkdir()
    (tmp_path / "analysis" / "x.py").write_text("def figure(doc, n=1):\n    return doc['window']\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert document_takers() == [("analysis/x.py", "figure", 1)]

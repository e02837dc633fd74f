"""`veristep verify tools` reads a line's "language" (BFCL's Java/JavaScript typing mode)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_cli_reads_the_language_of_a_line(tmp_path):
    tools = [{"name": "Util.run", "parameters": {"type": "dict", "properties": {
        "flag": {"type": "boolean"}, "n": {"type": "long"}}, "required": ["flag", "n"]}}]
    expected = [{"Util.run": {"flag": ["true"], "n": ["5L"]}}]
    call = '<tool_call>{"name": "Util.run", "arguments": {"flag": "true", "n": "5L"}}</tool_call>'
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"completion": call, "tools": tools, "expected": expected,
                               "language": "java"}) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "veristep", "verify", "tools", str(src), "--workers", "1",
                           "--no-progress", "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["veristep"]["status"] == "correct"

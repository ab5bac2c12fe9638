"""The README's Python example runs as written."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest


@pytest.mark.slow
def test_quickstart_runs(capsys):
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "backbones: [" in out and "rssm" in out
    assert "eval returns [" in out

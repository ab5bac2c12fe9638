"""``benchmarks/bench_old_class.py``: an old commit's class timed against today's, one process."""

from __future__ import annotations

import json
import subprocess

import pytest
from benchmark_scripts import BENCHMARKS, load_script

from wmzoo.nn.distributions import OneHotCategoricalST


def test_a_path_missing_at_the_commit_is_one_line():
    # Catches: a traceback (or an empty class) where the module did not exist at that commit.
    script = load_script("bench_old_class")
    with pytest.raises(SystemExit, match="no wmzoo/nn/absent.py at commit"):
        script.old_class("wmzoo.nn.absent", "Nothing", "HEAD")


def test_it_times_both_sides_and_leaves_todays_class_in_place(capsys):
    # Catches: the old methods left swapped onto the class after the run (every later caller in
    # the process would run the old code), or one side never timed.
    head = subprocess.run(["git", "-C", str(BENCHMARKS.parent), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    before = dict(vars(OneHotCategoricalST))
    script = load_script("bench_old_class")
    assert script.main(["--module", "wmzoo.nn.distributions", "--cls", "OneHotCategoricalST", "--commit", head,
                        "--backbone", "rssm", "--batch", "2", "--seq-len", "4", "--rounds", "2", "--iters", "1"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["old_s"] > 0 and record["new_s"] > 0 and len(record["round_s"]["old"]) == 2
    assert all(vars(OneHotCategoricalST)[k] is v for k, v in before.items() if callable(v) or isinstance(v, property))

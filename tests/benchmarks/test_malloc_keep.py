"""``benchmarks/malloc_keep.py``: the two malloc settings it alternates are glibc's steady state
and the CLI's, and a unit it does not know is one line, exit 2. (Its figures, minutes of paper-size
updates, are in benchmarks/README.md.)"""

from __future__ import annotations

import pytest

from benchmark_scripts import load_script
from wmzoo.cli import FREED_MEMORY_KEPT


@pytest.fixture(scope="module")
def malloc_keep():
    return load_script("malloc_keep")


def test_it_compares_glibcs_steady_state_with_what_the_cli_sets(malloc_keep):
    # Catches: the 'keep' arm timing another setting than the CLI's, or 'system' not glibc's ceiling.
    assert malloc_keep.ARMS == {"system": (32 << 20, 64 << 20), "keep": (FREED_MEMORY_KEPT, FREED_MEMORY_KEPT)}


@pytest.mark.parametrize("name, message", [("dreamer:imagination", "unknown backbone 'dreamer'"),
                                           ("rssm:tokenizer_update", "rssm has no unit 'tokenizer_update'")])
def test_an_unknown_unit_is_one_line_and_exit_2(malloc_keep, capsys, name, message):
    assert malloc_keep.main([name, "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err

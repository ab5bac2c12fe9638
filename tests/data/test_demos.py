"""Demonstrations for imitation: word ids of the missions and the windows with their conditions."""

from __future__ import annotations

import numpy as np
import pytest

from wmzoo.data.dataset import iter_episodes
from wmzoo.data.demos import PAD, UNKNOWN, Demonstrations, Vocabulary, words
from wmzoo.data.generate import generate
from wmzoo.errors import WmzooError


def test_vocabulary_ids_padding_and_unknown_words():
    # catches: ids that collide with padding (0) or the unknown id (1), words out of order,
    # case or punctuation splitting a word in two
    vocab = Vocabulary.build(["Go to the red ball", "pick up the key, then go"], max_words=8)
    assert vocab.words == ("ball", "go", "key", "pick", "red", "the", "then", "to", "up")
    ids = vocab.encode("go to the RED box")
    assert ids.tolist() == [3, 9, 7, 6, UNKNOWN, PAD, PAD, PAD]
    assert words("put the ball, next to it") == ["put", "the", "ball", "next", "to", "it"]


def test_a_mission_longer_than_max_words_is_one_line():
    with pytest.raises(WmzooError, match="policy.max_words=4.*--set policy.max_words=5"):
        Vocabulary.build(["go to the red ball"], max_words=4)


@pytest.fixture(scope="module")
def demos_root(tmp_path_factory):
    pytest.importorskip("minigrid")
    root = tmp_path_factory.mktemp("demos") / "d"
    generate("babyai-goto-local", 10, root, size=16, log=lambda _: None)
    return root


def test_rows_conditions_and_acted_follow_the_episodes(demos_root):
    # catches: `acted` true at an episode's last row (its zero action taught as a demonstration)
    # or false at its first; a mission given to the neighbouring episode's rows; rows reordered
    episodes = list(iter_episodes(demos_root, "train"))
    demos = Demonstrations(demos_root, "train")
    vocab = Vocabulary.build(demos.missions, 16)
    demos.read_with(vocab.encode)
    start = 0
    for e in episodes:
        n = len(e["reward"])
        assert demos.rows["is_first"][start] and not demos.rows["is_first"][start + 1 : start + n].any()
        assert demos.acted[start : start + n].tolist() == [True] * (n - 1) + [False]
        assert (demos.condition[start : start + n] == vocab.encode(str(e["mission"][0]))).all()
        assert np.array_equal(demos.rows["obs"][start : start + n], e["obs"])
        start += n
    assert start == len(demos)
    assert len(demos.actions) == sum(len(e["reward"]) - 1 for e in episodes)


def test_a_window_is_consecutive_rows_with_their_conditions(demos_root):
    # catches: the condition or `acted` of a window taken from other rows than its frames
    demos = Demonstrations(demos_root, "train")
    demos.read_with(Vocabulary.build(demos.missions, 16).encode)
    demos.seed(3)
    batch, condition, acted = demos.sample(4, 5)
    assert batch.shape == (4, 5) and condition.shape == (4, 5, 16) and acted.shape == (4, 5)
    for b in range(4):
        hits = [s for s in range(len(demos) - 4) if np.array_equal(demos.rows["obs"][s : s + 5], batch.obs[b].numpy())
                and np.array_equal(demos.rows["action"][s : s + 5], batch.action[b].numpy())]
        assert hits, "a window that is not consecutive rows"
        s = hits[0]
        assert np.array_equal(demos.condition[s : s + 5], condition[b].numpy())
        assert np.array_equal(demos.acted[s : s + 5], acted[b].numpy())


def test_windows_longer_than_the_data_are_one_line(demos_root):
    demos = Demonstrations(demos_root, "train")
    with pytest.raises(WmzooError, match="lower model.seq_len"):
        demos.sample(1, len(demos) + 1)

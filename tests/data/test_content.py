"""Content fingerprints (agent/data/content.py): one dataset is one source whatever its name, and
the held-out packages' tables stay out of the knowledge base by content."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.data import load_dataset
from agent.data.content import content_print, same_content

REPO = Path(__file__).resolve().parents[2]


def test_a_copy_under_another_name_a_sample_and_a_reordering_are_the_same_content() -> None:
    cancer, brca = load_dataset("breast-cancer"), load_dataset("r:dslabs/brca")
    assert same_content(content_print(cancer.X, cancer.y), content_print(brca.X, brca.y))
    rng = np.random.default_rng(0)
    rows, cols = rng.choice(len(cancer.X), 256, replace=False), rng.permutation(cancer.X.shape[1])
    assert same_content(content_print(cancer.X[rows][:, cols]), content_print(cancer.X))
    iris, r_iris = load_dataset("iris"), load_dataset("r:datasets/iris")
    assert same_content(content_print(iris.X), content_print(r_iris.X))


def test_different_tables_are_different_content() -> None:
    prints = {
        name: content_print(load_dataset(name).X) for name in ("breast-cancer", "wine", "iris", "r:carData/Arrests")
    }
    for a in prints:
        for b in prints:
            assert same_content(prints[a], prints[b]) == (a == b), (a, b)


def test_held_out_tables_are_found_by_content_whatever_their_name() -> None:
    from agent.data.rtables import held_out_match

    peng = load_dataset("r:heplots/peng")  # "penguins near Palmer Station": the name rule missed it
    assert held_out_match(peng.X, peng.y) == "palmerpenguins/penguins"
    baseball = load_dataset("r:vcd/Baseball")
    assert held_out_match(baseball.X, baseball.y) == "ISLR/Hitters"
    assert held_out_match(load_dataset("wine").X) is None


def test_no_shipped_r_table_has_held_out_content_and_none_copies_another() -> None:
    from agent.data.rtables import BUILTIN_TABLES, held_out_match, shipped_tables

    tables = shipped_tables()
    names = {(t.package, t.item) for t in tables}
    assert ("heplots", "peng") not in names and ("dslabs", "brca") not in names
    seen = [content_print(d.X, d.y) for d in map(load_dataset, BUILTIN_TABLES)]
    for t in tables:
        data = load_dataset(t.spec)
        assert held_out_match(data.X, data.y) is None, t.spec
        mine = content_print(data.X, data.y)
        assert not any(same_content(mine, other) for other in seen), t.spec
        seen.append(mine)


def test_the_starter_holds_each_content_once_and_nothing_held_out() -> None:
    from agent.data.rtables import held_out_match

    archive = np.load(REPO / "agent" / "knowledge" / "starters" / "mlp.npz", allow_pickle=False)
    studies = json.loads(archive["header"].tobytes().decode())["studies"]
    prints = []
    for i, study in enumerate(studies):
        X, y = archive[f"X{i}"], archive[f"y{i}"]
        summary = study["summary"]
        if summary["kind"] == "tabular":
            assert held_out_match(X, y) is None, study["name"]
        prints.append((study["name"], summary["source"], summary["kind"], content_print(X, y)))
    for i, (name, source, kind, mine) in enumerate(prints):
        for other, other_source, other_kind, theirs in prints[i + 1 :]:
            if source != other_source and kind == other_kind:
                assert not same_content(mine, theirs), (name, other)


def test_a_study_records_its_content_digest_and_bootstrap_refuses_copies() -> None:
    from agent.data import describe_dataset
    from agent.pipeline.bootstrap import distinct_content

    summary = describe_dataset(load_dataset("wine"))
    assert summary["content"] == content_print(load_dataset("wine").X, load_dataset("wine").y).digest
    said: list[str] = []
    kept = distinct_content(["breast-cancer", "wine", "r:dslabs/brca", "r:heplots/peng", "iris"], said.append)
    assert kept == ["breast-cancer", "wine", "iris"]
    assert any("r:dslabs/brca left out" in s and "breast-cancer" in s for s in said)
    assert any("r:heplots/peng left out" in s and "palmerpenguins/penguins" in s for s in said)


@pytest.mark.parametrize("bad", [np.zeros((50, 3)), np.ones((10, 1))])
def test_constant_data_has_a_print_and_matches_nothing_by_its_columns(bad: np.ndarray) -> None:
    empty = content_print(bad)
    assert empty.columns.shape == (0, 6) and not same_content(empty, content_print(load_dataset("wine").X))

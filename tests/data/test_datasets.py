"""Tests of agent.data on real data: built-ins, variants, files, split/sample/describe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent.data import BUILTIN_DATASETS, Dataset, describe_dataset, load_dataset, sample_dataset, split_dataset
from agent.errors import DatasetError

EXPECTED = {
    "digits": ("image", (1, 8, 8), 1797, 10),
    "mnist-5k": ("image", (1, 28, 28), 5000, 10),
    "mnist1d": ("sequence", (1, 40), 5000, 10),
    "lfw-subset": ("image", (1, 25, 25), 200, 2),
    "bars": ("image", (1, 8, 8), 2000, 4),
    "breast-cancer": ("tabular", (30,), 569, 2),
    "wine": ("tabular", (13,), 178, 3),
    "iris": ("tabular", (4,), 150, 3),
}


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset("digits")


def _raises_one_line(spec: str, *args: object, match: str = "") -> str:
    with pytest.raises(DatasetError, match=match) as info:
        load_dataset(spec, *args)
    message = str(info.value)
    assert message and "\n" not in message
    return message


# ---- built-ins -------------------------------------------------------------------------


def test_builtin_names() -> None:
    assert set(BUILTIN_DATASETS) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_loads(name: str) -> None:
    kind, shape, n, k = EXPECTED[name]
    ds = load_dataset(name)
    assert (ds.name, ds.source, ds.kind) == (name, name, kind)
    assert ds.feature_shape == shape and ds.n == n and ds.num_classes == k
    assert ds.X.dtype == np.float32 and ds.y.dtype == np.int64
    assert set(np.unique(ds.y)) == set(range(k)) and len(ds.class_names) == k
    assert np.isfinite(ds.X).all()
    if kind == "image":
        assert ds.X.min() >= 0.0 and ds.X.max() <= 1.0
    assert not ds.X.flags.writeable and not ds.y.flags.writeable


def test_digits_scaling(digits: Dataset) -> None:
    from sklearn.datasets import load_digits

    raw = load_digits()
    np.testing.assert_allclose(digits.X.reshape(len(digits.X), -1), raw.data / 16.0, rtol=1e-6)
    assert digits.X.max() == 1.0


# ---- variants ---------------------------------------------------------------------------


def test_class_subset_relabels(digits: Dataset) -> None:
    ds = load_dataset("digits?classes=3-5,8")
    assert ds.name == "digits?classes=3-5,8" and ds.source == "digits"
    assert ds.class_names == ("3", "4", "5", "8") and ds.num_classes == 4
    assert set(np.unique(ds.y)) == {0, 1, 2, 3}
    mask = np.isin(digits.y, [3, 4, 5, 8])
    assert ds.n == int(mask.sum())
    np.testing.assert_array_equal(ds.X, digits.X[mask])
    np.testing.assert_array_equal(ds.y[digits.y[mask] == 8], 3)


def test_fraction_is_stratified_and_seeded(digits: Dataset) -> None:
    a = load_dataset("digits?fraction=0.3")
    b = load_dataset("digits?fraction=0.3")
    c = load_dataset("digits?fraction=0.3&seed=1")
    full = np.bincount(digits.y)
    part = np.bincount(a.y, minlength=10)
    assert np.all(np.abs(part - np.round(0.3 * full)) <= 1)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.n == c.n and not np.array_equal(a.X, c.X)
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_rows_and_size_make_a_smaller_base(digits: Dataset) -> None:
    """``rows`` is one fixed stratified sample (fractions are drawn from it); ``size`` resizes
    images by area averaging, so halving 28x28 is the mean of each 2x2 block."""
    base = load_dataset("digits?rows=500")
    assert base.n == 500 and np.all(np.abs(np.bincount(base.y) - np.bincount(digits.y) * 500 / digits.n) <= 1)
    part = load_dataset("digits?rows=500&fraction=0.2&seed=4")
    rows = {r.tobytes() for r in base.X}
    assert part.n == 100 and all(r.tobytes() in rows for r in part.X)
    small, full = load_dataset("mnist-5k?rows=50&size=14"), load_dataset("mnist-5k?rows=50")
    assert small.X.shape == (50, 1, 14, 14)
    np.testing.assert_allclose(small.X, full.X.reshape(50, 1, 14, 2, 14, 2).mean(axis=(3, 5)), atol=1e-6)
    odd = load_dataset("lfw-subset?size=12")
    assert odd.X.shape == (200, 1, 12, 12) and 0.0 <= odd.X.min() and odd.X.max() <= 1.0
    _raises_one_line("mnist1d?size=10", match="size= resizes images")
    _raises_one_line("digits?rows=0", match="positive integer")
    _raises_one_line("digits?size=x", match="positive integer")


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("digits?fraction=0.3&classes=0-4", "digits?classes=0-4&fraction=0.3"),
        ("digits?classes=4,0-3&fraction=0.30", "digits?classes=0-4&fraction=0.3"),
        ("digits?fraction=1&seed=0", "digits"),
        ("iris?seed=5&classes=1-2", "iris?classes=1-2"),
        ("wine?seed=2&fraction=0.5", "wine?fraction=0.5&seed=2"),
        ("mnist-5k?fraction=0.5&size=10&rows=300&seed=3", "mnist-5k?rows=300&size=10&fraction=0.5&seed=3"),
    ],
)
def test_canonical_names(spec: str, canonical: str) -> None:
    ds = load_dataset(spec)
    assert ds.name == canonical
    assert load_dataset(canonical).fingerprint == ds.fingerprint


def test_fingerprints_stable_and_distinct() -> None:
    names = ["digits", "digits?classes=0-4", "digits?fraction=0.5", "iris", "wine"]
    prints = [load_dataset(n).fingerprint for n in names]
    assert len(set(prints)) == len(prints)
    assert all(len(p) == 16 for p in prints)
    assert load_dataset("digits").fingerprint == prints[0]
    code = "from agent.data import load_dataset; print(load_dataset('digits?classes=0-4').fingerprint)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == prints[1]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("digitz", "unknown dataset 'digitz'.*mnist1d"),
        ("digits?colour=red", "valid options: classes"),
        ("digits?classes", "valid options"),
        ("digits?classes=5-2", "bad classes"),
        ("digits?classes=a", "bad classes"),
        ("digits?classes=12", "no class 12"),
        ("digits?fraction=0", "bad fraction"),
        ("digits?fraction=1.5", "bad fraction"),
        ("digits?fraction=x", "bad fraction"),
        ("digits?seed=-1", "bad seed"),
        ("digits?seed=1&seed=2", "given twice"),
        ("digits?classes=7", "single class"),
        ("iris?classes=0&fraction=0.5", "single class"),
        ("iris?fraction=0.01", "at least 10"),
        ("", "empty dataset spec"),
    ],
)
def test_bad_specs(spec: str, match: str) -> None:
    _raises_one_line(spec, match=match)


def test_label_rejected_for_builtin() -> None:
    _raises_one_line("iris", "species", match="--label and --drop only apply")


# ---- split / sample / describe ----------------------------------------------------------


def test_split_is_deterministic_and_stratified(digits: Dataset) -> None:
    train, val = split_dataset(digits, 0.2, seed=0)
    train2, val2 = split_dataset(digits, 0.2, seed=0)
    np.testing.assert_array_equal(train, train2)
    np.testing.assert_array_equal(val, val2)
    assert not np.array_equal(val, split_dataset(digits, 0.2, seed=1)[1])
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == digits.n
    ratio = np.bincount(digits.y[val], minlength=10) / np.bincount(digits.y)
    assert np.all(np.abs(ratio - 0.2) < 0.02)
    with pytest.raises(DatasetError):
        split_dataset(digits, 1.0)


def test_sample_is_fixed_size_stratified_and_seeded(digits: Dataset) -> None:
    X, y = sample_dataset(digits, n=200, seed=3)
    X2, y2 = sample_dataset(digits, n=200, seed=3)
    assert X.shape == (200, 1, 8, 8) and y.shape == (200,)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    expected = 200 * np.bincount(digits.y) / digits.n
    assert np.all(np.abs(np.bincount(y, minlength=10) - expected) <= 1)
    assert not np.array_equal(X, sample_dataset(digits, n=200, seed=4)[0])


def test_sample_of_small_dataset_returns_all_shuffled() -> None:
    iris = load_dataset("iris")
    X, y = sample_dataset(iris, n=256)
    assert X.shape == (150, 4)
    np.testing.assert_array_equal(np.bincount(y), np.bincount(iris.y))
    assert not np.array_equal(y, iris.y)


def test_describe_is_plain_json(digits: Dataset) -> None:
    stats = describe_dataset(digits)
    json.dumps(stats)
    assert all(type(v) in (int, float, str) for v in stats.values())
    assert stats["n"] == 1797 and stats["n_features"] == 64 and stats["num_classes"] == 10
    assert stats["kind"] == "image" and stats["source"] == "digits"
    assert 3.3 < stats["class_entropy"] <= np.log2(10) + 1e-9
    assert 0 < stats["min_class_fraction"] <= 0.1 <= stats["max_class_fraction"] < 1
    assert 0 < stats["zero_fraction"] < 1 and 0 <= stats["feature_mean"] <= 1


# ---- user files ---------------------------------------------------------------------------


def _digits_frame(digits: Dataset, n: int = 120):
    import pandas as pd

    df = pd.DataFrame(digits.X[:n].reshape(n, -1), columns=[f"p{i}" for i in range(64)])
    df["target"] = [f"d{v}" for v in digits.y[:n]]
    return df


def test_npz_round_trips(tmp_path: Path, digits: Dataset) -> None:
    for X, shape, kind, tol in [
        (digits.X[:100].reshape(100, 64), (64,), "tabular", 1e-6),
        ((digits.X[:100, 0] * 255).astype(np.uint8), (1, 8, 8), "image", 1 / 255),
        (digits.X[:100], (1, 8, 8), "image", 1e-6),
        (np.repeat(digits.X[:100], 3, 1).transpose(0, 2, 3, 1), (3, 8, 8), "image", 1e-6),
    ]:
        path = tmp_path / "d.npz"
        np.savez(path, X=X, y=digits.y[:100])
        ds = load_dataset(str(path))
        assert (ds.kind, ds.feature_shape, ds.source) == (kind, shape, "file")
        assert ds.name == f"file:{path.resolve()}"
        first = ds.X[:, 0] if kind == "image" else ds.X
        np.testing.assert_allclose(first.reshape(100, -1), digits.X[:100].reshape(100, -1), atol=tol)
        np.testing.assert_array_equal(ds.y, digits.y[:100])
    assert load_dataset(ds.name).fingerprint == ds.fingerprint


def test_csv_and_parquet_round_trip(tmp_path: Path, digits: Dataset) -> None:
    df = _digits_frame(digits)
    df.to_csv(tmp_path / "d.csv", index=False)
    df.to_parquet(tmp_path / "d.parquet", index=False)
    a, b = load_dataset(str(tmp_path / "d.csv")), load_dataset(str(tmp_path / "d.parquet"))
    pixels = digits.X[:120].reshape(120, -1)
    varying = pixels.std(axis=0) > 0  # the always-blank border pixels are dropped as constant
    for ds in (a, b):
        assert ds.kind == "tabular" and ds.feature_shape == (int(varying.sum()),) and ds.n == 120
        assert f"dropped {', '.join(df.columns[:64][~varying][:6])}" in ds.preparation
        assert ds.class_names == tuple(f"d{i}" for i in range(10))
        np.testing.assert_array_equal(ds.y, digits.y[:120])
        np.testing.assert_allclose(ds.X, pixels[:, varying], atol=1e-6)
    assert a.fingerprint == b.fingerprint
    renamed = df.rename(columns={"target": "digit"})
    renamed.to_csv(tmp_path / "r.csv", index=False)
    ds = load_dataset(str(tmp_path / "r.csv"), label="digit")
    assert ds.name == f"file:{(tmp_path / 'r.csv').resolve()}#label=digit"
    assert ds.fingerprint == a.fingerprint
    assert load_dataset(ds.name).fingerprint == a.fingerprint


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_image_folder_round_trip(tmp_path: Path, digits: Dataset, mode: str) -> None:
    from PIL import Image

    for i in range(30):
        folder = tmp_path / f"class_{digits.y[i]}"
        folder.mkdir(exist_ok=True)
        pixels = (digits.X[i, 0] * 255).round().astype(np.uint8)
        Image.fromarray(pixels, mode="L").convert(mode).save(folder / f"img{i:02d}.png")
    ds = load_dataset(str(tmp_path))
    channels = 1 if mode == "L" else 3
    assert ds.kind == "image" and ds.feature_shape == (channels, 8, 8) and ds.n == 30
    assert ds.class_names == tuple(f"class_{c}" for c in sorted(set(digits.y[:30])))
    assert ds.X.min() >= 0 and ds.X.max() <= 1
    order = sorted(range(30), key=lambda i: (f"class_{digits.y[i]}", f"img{i:02d}.png"))
    np.testing.assert_allclose(ds.X[:, 0], digits.X[order, 0], atol=1 / 255 + 1e-6)


def test_image_folder_resizes_and_caps(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(12):
        folder = tmp_path / ("a" if i % 2 else "b")
        folder.mkdir(exist_ok=True)
        size = (100, 80) if i == 1 else (30 + i, 20)  # 01.png in a/ comes first
        Image.fromarray(rng.integers(0, 255, size[::-1], dtype=np.uint8)).save(folder / f"{i:02d}.png")
    ds = load_dataset(str(tmp_path))
    assert ds.feature_shape == (1, 64, 64)


# ---- file errors --------------------------------------------------------------------------


def test_file_errors(tmp_path: Path, digits: Dataset) -> None:
    _raises_one_line(str(tmp_path / "missing.csv"), match="dataset file not found: ")
    (tmp_path / "empty.csv").write_text("")
    _raises_one_line(str(tmp_path / "empty.csv"), match="empty")
    (tmp_path / "header.csv").write_text("a,b,label\n")
    _raises_one_line(str(tmp_path / "header.csv"), match="empty")
    (tmp_path / "bad.npz").write_bytes(b"this is not a zip archive at all")
    _raises_one_line(str(tmp_path / "bad.npz"), match="cannot read")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage \x00\x01")
    _raises_one_line(str(tmp_path / "bad.parquet"), match="cannot read")
    (tmp_path / "data.txt").write_text("1,2,3\n")
    _raises_one_line(str(tmp_path / "data.txt"), match="unsupported dataset file type '.txt'")

    df = _digits_frame(digits, 40)
    df.drop(columns=["target"]).to_csv(tmp_path / "nolabel.csv", index=False)
    _raises_one_line(str(tmp_path / "nolabel.csv"), match="has no label column; pass --label")
    _raises_one_line(str(tmp_path / "nolabel.csv"), "nope", match="has no column 'nope'")
    df.assign(colour="red", size="big").to_csv(tmp_path / "text.csv", index=False)
    assert "-> 51 features; dropped p0, p8" in load_dataset(str(tmp_path / "text.csv")).preparation  # +colour, size
    df.assign(target="same").to_csv(tmp_path / "one.csv", index=False)
    _raises_one_line(str(tmp_path / "one.csv"), match="single class")
    df.head(5).to_csv(tmp_path / "tiny.csv", index=False)
    _raises_one_line(str(tmp_path / "tiny.csv"), match="only 5 instances")


def test_npz_errors(tmp_path: Path, digits: Dataset) -> None:
    np.savez(tmp_path / "nox.npz", features=digits.X[:50], y=digits.y[:50])
    _raises_one_line(str(tmp_path / "nox.npz"), match="lacks array.*X")
    np.savez(tmp_path / "len.npz", X=digits.X[:50], y=digits.y[:40])
    _raises_one_line(str(tmp_path / "len.npz"), match="50 rows but y has 40")
    np.savez(tmp_path / "zero.npz", X=digits.X[:0], y=digits.y[:0])
    _raises_one_line(str(tmp_path / "zero.npz"), match="empty")
    np.savez(tmp_path / "nan.npz", X=np.full((20, 3), np.nan), y=np.arange(20) % 2)
    _raises_one_line(str(tmp_path / "nan.npz"), match="non-finite")
    np.savez(tmp_path / "ok.npz", X=digits.X[:50], y=digits.y[:50])
    _raises_one_line(str(tmp_path / "ok.npz"), "target", match="--label and --drop only apply")


def test_image_folder_errors(tmp_path: Path) -> None:
    (tmp_path / "flat").mkdir()
    _raises_one_line(str(tmp_path / "flat"), match="no class sub-folders")
    (tmp_path / "flat" / "a").mkdir()
    _raises_one_line(str(tmp_path / "flat"), match="holds no images")
    (tmp_path / "flat" / "a" / "broken.png").write_bytes(b"not a png")
    _raises_one_line(str(tmp_path / "flat"), match="cannot read image")

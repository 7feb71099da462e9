"""kb-scale's cheaper fit path (agent.bench.kb_scale.shared_fits), on a real sqlite store: every
copy's source GP is stored under the data a study reads from the store, so `bootstrap` fits none."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def test_the_cheaper_fit_path_stores_every_copys_gp_under_the_data_a_study_reads(store, tmp_path: Path) -> None:
    from agent.bench.kb_scale import shared_fits
    from agent.bench.silence import _copy
    from agent.jobs import load_job
    from agent.knowledge.starter import read_starter, write_entries, write_starter
    from agent.surrogates.source_fits import SourceFits
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning.source_models import history_sources

    header, entries = read_starter("mlp")
    few = entries[:3]
    rng = np.random.default_rng(0)
    copies = few + [_copy(e, 1, rng) for e in few]
    path = tmp_path / "x2.npz"
    write_starter(path, header["job"], header["space"], copies)
    models = tmp_path / "models"
    assert shared_fits(path, models) == 3  # the three copies take their originals' fits

    kb = store.kb()
    write_entries(kb, copies, header["space"], "test")
    space = load_job("mlp").space
    sources = history_sources(kb, "mlp", space, None)
    fits = SourceFits(SourceModelStore(models))
    assert len(sources) == 6 and len({s.digest for s in sources}) == 6
    assert fits.missing(sources) == []
    by_name = {s.name: s for s in sources}
    original, copy = by_name[few[0]["settings"]["dataset_name"]], by_name[copies[3]["settings"]["dataset_name"]]
    store_file = SourceModelStore(models)
    assert store_file.fit(copy.digest, "plain")["state"] == store_file.fit(original.digest, "plain")["state"]
    assert not np.array_equal(original.y, copy.y)  # its own data, its original's hyperparameters

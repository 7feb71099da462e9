"""One registry mechanism (agent/registry.py) for samplers, surrogates and jobs: built-in names
resolve to their typed entries, and another installed package adds entries through entry points
(a real distribution's metadata on the import path, read by importlib.metadata in a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.registry import BUILTIN, JOBS, SAMPLERS, SURROGATES, Registry, UnknownEntryError

REPO = Path(__file__).resolve().parents[1]


def test_every_builtin_name_resolves_to_an_entry_of_its_kind() -> None:
    from agent.jobs.base import validate_job
    from agent.samplers.registry import SamplerSpec
    from agent.surrogates.contract import SurrogateSpec

    for name in BUILTIN["samplers"]:
        spec = SAMPLERS.load(name)
        assert isinstance(spec, SamplerSpec) and spec.name == name
    for name in BUILTIN["surrogates"]:
        spec = SURROGATES.load(name)
        assert isinstance(spec, SurrogateSpec) and spec.name == name
    for name in BUILTIN["jobs"]:
        job = validate_job(JOBS.load(name)(), name)
        assert job.name == name
    assert SURROGATES.choices()[-1] == "auto" and "auto" not in SURROGATES.names()


def test_an_unknown_name_is_one_line_naming_the_choices() -> None:
    with pytest.raises(UnknownEntryError, match=r"^--sampler must be one of bo, random, .*, got 'nope'$"):
        SAMPLERS.load("nope")
    with pytest.raises(UnknownEntryError, match=r"--surrogate must be one of .*rgpe, tnp, auto, got 'x'"):
        SURROGATES.check("x")


def test_an_entry_registered_at_run_time_is_listed_until_removed() -> None:
    registry = Registry("samplers", "--sampler")
    marker = object()
    registry.register("mine", marker)
    assert registry.names()[-1] == "mine" and registry.load("mine") is marker
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mine", object())
    with pytest.raises(ValueError, match="not one registered at run time"):
        registry.unregister("bo")
    registry.unregister("mine")
    assert "mine" not in registry


def _plugin(root: Path) -> Path:
    """An installed distribution as pip leaves it: a package and its dist-info with entry points."""
    (root / "tiny_plugin").mkdir(parents=True)
    (root / "tiny_plugin" / "__init__.py").write_text(
        textwrap.dedent(
            """
            from agent.samplers.registry import SamplerSpec


            def _build(space, settings, planned):
                from agent.samplers.random_search import RandomSampler

                return RandomSampler(space, settings)


            SOBOLISH = SamplerSpec("plugin-random", "a plugin's sampler", "none", _build)
            TAKEN = SamplerSpec("bo", "a plugin that takes a built-in's name", "none", _build)


            class StopAtOne:
                def rungs(self, max_epochs):
                    return [1] if max_epochs > 1 else []

                def verdict(self, epoch, value, peers):
                    return "the plugin stops every trial at epoch 1"


            STOP_AT_ONE = StopAtOne()


            class Shape:
                method = "shape"
                standardise = True

                def vector(self, X, y, kind, num_classes, summary):
                    import numpy as np

                    return np.array([float(len(X)), float(X.shape[1]), float(num_classes)])


            def shape(models_dir):
                return Shape()


            def tiny_job():
                from agent.jobs.mlp import MLPJob

                return MLPJob()
            """
        )
    )
    info = root / "tiny_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[tune_agent.samplers]\nplugin-random = tiny_plugin:SOBOLISH\nbo = tiny_plugin:TAKEN\n"
        "broken = tiny_plugin:MISSING\n\n[tune_agent.jobs]\ntiny-mlp = tiny_plugin:tiny_job\n\n"
        "[tune_agent.pruners]\nstop-at-one = tiny_plugin:STOP_AT_ONE\n\n"
        "[tune_agent.warm_starts]\nshape = tiny_plugin:shape\n"
    )
    return root


def _run(code: str, plugin: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), str(REPO)])}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_another_package_adds_a_sampler_a_pruner_meta_features_and_a_job_through_entry_points(
    store, tmp_path: Path
) -> None:
    plugin = _plugin(tmp_path / "site")
    listing = _run(
        "import json\nfrom agent.registry import SAMPLERS, JOBS, PRUNERS, WARM_STARTS\n"
        "from agent.tuning.warmstart import _featurizer\n"
        "print(json.dumps([SAMPLERS.names(), JOBS.names(), SAMPLERS.skipped(), PRUNERS.names(),"
        " WARM_STARTS.choices(), _featurizer('shape', 'models')[0].method]))",
        plugin,
        tmp_path,
    )
    assert listing.returncode == 0, listing.stderr
    samplers, jobs, skipped, pruners, warm_starts, featurizer = json.loads(listing.stdout)
    assert warm_starts == [*BUILTIN["warm_starts"], "shape", "auto", "none"] and featurizer == "shape"
    assert pruners == [*BUILTIN["pruners"], "stop-at-one"]
    assert samplers[:5] == list(BUILTIN["samplers"]) and samplers[5:] == ["broken", "plugin-random"]
    assert jobs == [*BUILTIN["jobs"], "tiny-mlp"]
    assert skipped == ["bo (tiny_plugin:TAKEN): the name is taken"]

    # the plugin's sampler and job, by name, through the command line: a study is created and asked
    create = (
        "from agent.cli import main\n"
        "main(['create', '--job', 'tiny-mlp', '--dataset', 'wine', '--sampler', 'plugin-random', '--trials', '2',"
        f" '--warm-start', 'shape', '--pruner', 'stop-at-one', '--study-name', 'plugin-study',"
        f" '--tracking-uri', {store.uri!r},"
        f" '--artifact-root', {store.artifacts!r}])"
    )
    made = _run(create, plugin, tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    record = store.kb().find_study("plugin-study")
    assert record is not None and record.settings["sampler"] == "plugin-random" and record.settings["job"] == "tiny-mlp"
    assert record.settings["pruner"] == "stop-at-one" and record.settings["warm_start"] == "shape"
    asked = _run(
        f"from agent.cli import main\nmain(['ask', 'plugin-study', '--tracking-uri', {store.uri!r}])", plugin, tmp_path
    )
    assert asked.returncode == 0, asked.stderr[-2000:]
    assert json.loads(asked.stdout)["trial"] == 1

    broken = _run(create.replace("plugin-random", "broken").replace("plugin-study", "other"), plugin, tmp_path)
    assert broken.returncode == 2
    assert (
        broken.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--sampler broken: the samplers entry point tiny_plugin:MISSING failed to load: "
            "AttributeError: module 'tiny_plugin' has no attribute 'MISSING'"
        )
    )

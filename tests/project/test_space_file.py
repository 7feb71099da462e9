"""The space file, the signature checks and the DataModule sample, without training anything."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from agent.errors import SpaceError
from agent.project.sample import as_dataset, pick_tensors, sample_loader
from agent.project.signature import check_arguments, starter_space
from agent.project.space_file import arguments, parse_space, read_space_file
from agent.project.spec import ProjectSpec, parse_trainer_options
from agent.space import Categorical, Float, Int


def test_a_space_file_with_conditions_and_fixed_values(tmp_path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "model.lr: {type: float, low: 1.0e-4, high: 0.1, log: true}\n"
        "model.width: {type: int, low: 8, high: 128}\n"
        "model.optimizer: {type: categorical, choices: [adam, sgd]}\n"
        "model.momentum: {type: float, low: 0.0, high: 0.95, when: {model.optimizer: sgd}}\n"
        "model.act: [relu, gelu]\n"
        "data.batch_size: {type: int, low: 16, high: 128, log: true}\n"
        "fixed:\n  model.num_classes: 10\n  model.encoder.depth: 2\n"
    )
    parsed = read_space_file(path)
    space = parsed.space
    assert space.names == [
        "model.lr",
        "model.width",
        "model.optimizer",
        "model.momentum",
        "model.act",
        "data.batch_size",
    ]
    assert isinstance(space["model.lr"], Float) and space["model.lr"].log
    assert isinstance(space["model.width"], Int) and isinstance(space["model.act"], Categorical)
    assert space["model.momentum"].condition.parent == "model.optimizer"
    adam = space.decode(space.encode({"model.lr": 0.01, "model.width": 16, "model.optimizer": "adam",
                                       "model.act": "relu", "data.batch_size": 32}))  # fmt: skip
    assert "model.momentum" not in adam  # inactive: the class's default applies
    values = {**parsed.fixed, **adam}
    assert arguments(values, "model") == {
        "num_classes": 10, "encoder": {"depth": 2}, "lr": pytest.approx(0.01), "width": 16,
        "optimizer": "adam", "act": "relu",
    }  # fmt: skip
    assert arguments(values, "data") == {"batch_size": 32}
    # the spec keeps the file's order (a parent before the arguments it conditions) through text
    spec = ProjectSpec(space=dict(parsed.raw), model="a.b:C")
    assert ProjectSpec.parse(spec.text()).space == spec.space
    assert list(ProjectSpec.parse(spec.text()).space) == list(parsed.raw)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("lr: {type: float, low: 0.1, high: 1}\n", "model.NAME"),
        ("model.lr: {type: floaty, low: 0.1, high: 1}\n", "float, int or categorical"),
        ("model.lr: {type: float, low: 0.1}\n", "numeric high"),
        ("model.lr: {type: float, low: 1, high: 0.1}\n", "model.lr"),
        ("model.n: {type: int, low: 1.5, high: 4}\n", "whole"),
        ("model.a: [x, y]\nmodel.b: {type: float, low: 0, high: 1, when: {model.a: x, model.c: y}}\n", "one parent"),
        ("model.b: {type: float, low: 0, high: 1, when: {model.a: x}}\nmodel.a: [x, y]\n", "defined before"),
        ("model.lr: {type: float, low: 0.1, high: 1, step: 2}\n", "unknown field"),
        ("model.lr: [a, a]\n", "twice"),
        ("fixed: {model.lr: 0.1}\nmodel.lr: {type: float, low: 0.1, high: 1}\n", "both tuned and fixed"),
        ("fixed: {model.lr: 0.1}\n", "tunes no argument"),
        ("model.lr: {type: float, low: 0.1, high: [\n", "not valid YAML"),
        ("- just a list\n", "mapping"),
    ],
)
def test_a_bad_space_file_is_one_line(text, needle, tmp_path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as caught:
        read_space_file(path)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


class Model:
    def __init__(
        self, lr: float = 0.001, hidden: int = 64, dropout: float = 0.1, act: str = "relu", flag: bool = False
    ):
        pass


def test_keys_are_checked_against_the_signature_with_the_closest_name() -> None:
    check_arguments(["model.lr", "model.hidden", "data.batch_size"], "model", Model, "space file")
    with pytest.raises(
        SpaceError, match=r"model.hiden is not an argument of .*Model.__init__; did you mean model.hidden\?"
    ):
        check_arguments(["model.hiden"], "model", Model, "space file")
    import lightning.pytorch as pl

    with pytest.raises(SpaceError, match="--epochs"):
        check_arguments(["trainer.max_epochs"], "trainer", pl.Trainer, "space file")
    check_arguments(["trainer.gradient_clip_val"], "trainer", pl.Trainer, "space file")


def test_a_starter_space_reads_back() -> None:
    import yaml

    parsed = parse_space(yaml.safe_load(starter_space(Model, "model")))
    assert {"model.lr", "model.hidden", "model.dropout", "model.flag"} <= set(parsed.space.names)
    assert parsed.space["model.lr"].log and parsed.space["model.lr"].contains(0.001)
    assert parsed.space["model.hidden"].contains(64)


def test_trainer_options_are_yaml_scalars_and_owned_ones_are_refused() -> None:
    from agent.errors import TuneAgentError

    assert parse_trainer_options(["precision=bf16-mixed", "devices=2", "deterministic=true"]) == {
        "precision": "bf16-mixed", "devices": 2, "deterministic": True,
    }  # fmt: skip
    with pytest.raises(TuneAgentError, match="--epochs"):
        parse_trainer_options(["max_epochs=3"])
    with pytest.raises(TuneAgentError, match="KEY=VALUE"):
        parse_trainer_options(["precision"])


def test_the_sample_is_bounded_and_says_which_tensors_it_used() -> None:
    X = torch.randn(5000, 1, 4, 4)
    y = torch.randint(0, 3, (5000,))
    seen = []

    class Counting(TensorDataset):
        def __getitem__(self, i):
            seen.append(i)
            return super().__getitem__(i)

    sample = sample_loader(DataLoader(Counting(X, y), batch_size=300), rows=1000)
    assert sample.X.shape == (1000, 1, 4, 4) and sample.y.shape == (1000,) and sample.note == ""
    assert len(seen) <= 1200  # four batches read, never the whole 5,000
    dataset = as_dataset(sample, "mine")
    assert dataset.X.shape == (1000, 16) and dataset.num_classes == 3

    batch = {"image": X[:8], "label": y[:8], "mask": torch.ones(8)}
    x, labels, note = pick_tensors(batch)
    assert x.shape[0] == 8 and labels is not None and "'image' as inputs" in note and "'label' as labels" in note
    x, labels, note = pick_tensors((X[:8], y[:8], torch.ones(8)))
    assert labels is not None and "3 items" in note


def test_a_continuous_target_is_binned_for_the_meta_features() -> None:
    rng = np.random.default_rng(0)
    said = []
    from agent.project.sample import LoaderSample

    dataset = as_dataset(LoaderSample(rng.normal(size=(300, 5)), rng.normal(size=300)), "reg", said.append)
    assert dataset.num_classes == 5 and any("continuous target" in line for line in said)


def test_the_heartbeat_names_a_long_phase_and_stays_quiet_otherwise() -> None:
    from agent.tuning.heartbeat import Heartbeat

    lines: list[str] = []
    with Heartbeat(lines.append, every=0.2) as beat:
        beat("first line")
        time.sleep(0.05)
        beat.phase("reading the history")
        deadline = time.perf_counter() + 60  # a guard against hanging, not a speed bound
        while not any(line.startswith("  still reading the history") for line in lines):
            assert time.perf_counter() < deadline, lines
            time.sleep(0.05)
    assert lines[0] == "first line"
    quiet: list[str] = []
    with Heartbeat(quiet.append, every=0.2) as beat:  # no phase named: nothing to say
        time.sleep(0.5)
    assert quiet == []

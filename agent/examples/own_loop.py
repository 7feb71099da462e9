"""tune-agent inside your own training script: your LightningModule, your data loaders, your
Trainer; tune-agent proposes each configuration, records each trial in MLflow and prunes.

    python -m agent.examples.own_loop --trials 6 --tracking-uri sqlite:///own-loop.db

The search space, metric and direction come from a job (here the example job's: ``lr``,
``weight_decay``, ``optimizer`` and, for SGD only, ``momentum``; minimise ``val_loss``).
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from agent.lightning import TuneAgentCallback, create_study, quiet_lightning
from agent.registry import PRUNERS


class WineNet(pl.LightningModule):
    """The user's own model: a small MLP on the 13 wine measurements."""

    def __init__(self, lr: float, weight_decay: float, optimizer: str, momentum: float | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        if hp["optimizer"] == "adam":
            return torch.optim.Adam(self.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        return torch.optim.SGD(
            self.parameters(), lr=hp["lr"], momentum=hp["momentum"] or 0.0, weight_decay=hp["weight_decay"]
        )


def loaders(seed: int = 0) -> tuple[DataLoader, DataLoader]:
    X, y = load_wine(return_X_y=True)
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(X_tr)
    as_set = lambda a, b: TensorDataset(torch.tensor(scaler.transform(a), dtype=torch.float32), torch.tensor(b))  # noqa: E731
    return DataLoader(as_set(X_tr, y_tr), batch_size=32, shuffle=True), DataLoader(as_set(X_va, y_va), batch_size=256)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study-name", default="own-loop")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--pruner", default="median", choices=PRUNERS.choices())
    parser.add_argument("--tracking-uri", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    quiet_lightning()  # Lightning's banners and hints off; the lines below say what happens
    # a study of that name goes on where it stopped (after a crash), else a new one is made
    study = create_study(
        args.study_name,
        dataset="wine",
        job="agent.jobs.examples:logistic",
        trials=args.trials,
        tracking_uri=args.tracking_uri,
        epochs=args.epochs,
        pruner=args.pruner,
        warm_start="none",
        load_if_exists=True,
    )
    train, val = loaders()
    while study.remaining() > 0:
        with study.trial() as trial:
            model = WineNet(**trial.config)
            trainer = pl.Trainer(
                max_epochs=args.epochs,
                callbacks=[TuneAgentCallback(trial)],
                logger=trial.logger(),
                enable_progress_bar=False,
                enable_model_summary=False,
                enable_checkpointing=False,
            )
            trainer.fit(model, train, val, ckpt_path=trial.resume_from)  # a killed run's slot continues
        print(
            f"trial {trial.number}: {trial.record.origin} {trial.config} -> "
            f"{'pruned: ' + trial.pruned if trial.pruned else f'val_loss={trial.value:.4f}'}"
        )
    best = study.best_trial
    print(f"best val_loss={best.value:.4f} at trial {best.number}: {best.params}")


if __name__ == "__main__":
    main()

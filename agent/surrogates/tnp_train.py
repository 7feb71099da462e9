"""Meta-training of a Transferable Neural Process (paper 004, Algorithm 1).

This module owns :func:`meta_train_tnp`: it learns the transferable initialisation ``θ~`` of a
:class:`~agent.surrogates.tnp.TNP` and its learned initial configurations from finished source
studies. Run it offline, once per family of studies (the same search space), save the network with
``TNP.save`` and use :func:`~agent.surrogates.tnp.build_tnp_model` per suggestion.

One outer step (Reptile, first order — no second derivatives):

1. sample ``meta_batch`` source tasks; for each, the others serve as across-dataset memory
   (``memory_tasks`` random tasks, ``memory_points`` random points each);
2. inner loop: from ``θ~``, ``inner_steps`` Adam steps of the Gaussian NLL, each on a fresh split of
   the task into a context (2 … ``context_max`` points) and targets (the context plus up to
   ``target_extra`` other points — predicting the context too, as in conditional NPs, teaches the
   model to be confident where it has data). y is standardised by the *context's* mean and std
   (floored at half the task's std), as a target study's few observations are at use;
3. initial configurations: from ``x~``, ``inner_steps`` gradient steps on the adapted model of
   ``-L_I = -Σ_j softmax(α μ)_j μ_j`` (paper §4.2, sign flipped because we maximise), where ``μ_j`` is
   the predicted standardised value at ``x_j`` given a context of that task;
4. outer update: ``θ~ ← θ~ + ε (θ_k − θ~)`` averaged over the tasks, taken through Adam (learning
   rate ``outer_lr``, ``init_lr`` for the configurations) on the direction ``θ~ − θ_k``; Adam's
   per-parameter scaling lets a few hundred steps suffice where plain SGD on ``ε`` would need far more.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from agent.surrogates.gp import torch_threads
from agent.surrogates.tnp import TNP, SourceBank, TNPConfig, episode_split

INIT_INNER_LR = 0.5  # SGD rate of the inner steps on initial-configuration logits
MIN_CONTEXT = 3
# Context std floor, relative to the task's overall std (1 after per-task standardisation): a
# context that happens to be flat would otherwise blow the targets up to dozens of stds.
STD_FLOOR = 0.5


def _memory(bank: SourceBank, exclude: int, cfg: TNPConfig, gen: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """Random other tasks (``memory_tasks``), ≤ ``memory_points`` random points each."""
    others = [i for i in torch.randperm(len(bank), generator=gen).tolist() if i != exclude]
    memory = []
    for i in others[: cfg.memory_tasks]:
        X, y = bank.tasks[i]
        keep = torch.randperm(len(y), generator=gen)[: cfg.memory_points]
        memory.append((X[keep], y[keep]))
    return memory


def _episode(X: Tensor, y: Tensor, cfg: TNPConfig, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Context `c x d`, `c` and targets `t x d`, `t` of one task, standardised by the context."""
    n = len(y)
    lo = min(MIN_CONTEXT, max(n - 1, 1))
    n_ctx = int(torch.randint(lo, max(lo, min(cfg.context_max, n - 1)) + 1, (1,), generator=gen))
    ctx, tgt = episode_split(n, n_ctx, n_ctx + cfg.target_extra, gen)
    mean = float(y[ctx].mean())
    std = max(float(y[ctx].std()) if n_ctx > 1 else 1.0, STD_FLOOR)
    return X[ctx], (y[ctx] - mean) / std, X[tgt], (y[tgt] - mean) / std


def _inner_loop(worker: TNP, X: Tensor, y: Tensor, memory: list, gen: torch.Generator) -> list[float]:
    """``inner_steps`` Adam steps of the NLL on fresh episodes of one task; returns the losses."""
    cfg = worker.config
    opt = torch.optim.Adam(worker.net_parameters(), lr=cfg.inner_lr)
    losses = []
    for _ in range(cfg.inner_steps):
        cx, cy, tx, ty = _episode(X, y, cfg, gen)
        loss = worker.nll(tx, ty, worker.prepare(cx, cy, memory))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(worker.net_parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
    return losses


def _init_config_direction(
    worker: TNP, X: Tensor, y: Tensor, memory: list, gen: torch.Generator
) -> tuple[Tensor, float]:
    """Reptile direction `n_initial x d` for the initial-configuration logits, and the mean `μ`."""
    cfg = worker.config
    with torch.no_grad():
        cx, cy, _, _ = _episode(X, y, cfg, gen)
        prep = worker.prepare(cx, cy, memory)
    start = worker.init_logits.detach()
    z = start.clone().requires_grad_(True)
    mu = torch.zeros(())
    for _ in range(cfg.inner_steps):
        mu, _ = worker.predict(torch.sigmoid(z), prep)
        loss = -(torch.softmax(cfg.init_temperature * mu, dim=0) * mu).sum()
        (grad,) = torch.autograd.grad(loss, z)
        z = (z - INIT_INNER_LR * grad).detach().requires_grad_(True)
    return start - z.detach(), float(mu.detach().mean())


def _outer_step(meta: TNP, worker: TNP, bank: SourceBank, outer: torch.optim.Optimizer, gen: torch.Generator) -> dict:
    """One Reptile update of ``meta`` over ``meta_batch`` tasks; returns the step's statistics."""
    cfg = meta.config
    outer.zero_grad()
    grads = [torch.zeros_like(p) for p in meta.parameters()]
    before, after, init_mu = [], [], []
    for _ in range(cfg.meta_batch):
        m = int(torch.randint(len(bank), (1,), generator=gen))
        X, y = bank.tasks[m]
        memory = _memory(bank, m, cfg, gen)
        worker.load_state_dict(meta.state_dict())
        losses = _inner_loop(worker, X, y, memory, gen)
        direction, mu = _init_config_direction(worker, X, y, memory, gen)
        with torch.no_grad():
            worker.init_logits.sub_(direction)
        for g, p, q in zip(grads, meta.parameters(), worker.parameters()):
            g.add_((p.detach() - q.detach()) / cfg.meta_batch)
        before.append(losses[0])
        after.append(losses[-1])
        init_mu.append(mu)
    for p, g in zip(meta.parameters(), grads):
        p.grad = g
    outer.step()
    return {"loss": float(np.mean(before)), "adapted_loss": float(np.mean(after)), "init_mu": float(np.mean(init_mu))}


def _report(logger: Any, record: dict) -> None:
    if logger is None:
        return
    if isinstance(logger, logging.Logger):
        logger.info("tnp meta-step %(step)d: nll %(loss).3f → %(adapted_loss).3f, init μ %(init_mu).2f", record)
    else:
        logger(record)


def meta_train_tnp(
    sources: Sequence[tuple[np.ndarray, np.ndarray]],
    config: TNPConfig,
    logger: logging.Logger | Callable[[dict], None] | None = None,
    log_every: int = 25,
) -> tuple[TNP, list[dict]]:
    """Meta-trains a TNP (float32) on source tasks (`n_i x d` cube points, `n_i` maximised values).

    Each source's y is standardised per task. Returns the network and one record per outer step:
    ``step``, ``loss`` (the meta-initialisation's NLL on a fresh episode, before adaptation),
    ``adapted_loss`` (after the inner loop) and ``init_mu`` (mean predicted standardised value at
    the initial configurations) — for plots. ``logger``: a ``logging.Logger`` or a callable taking
    each ``log_every``-th record.
    """
    bank = SourceBank(sources, dtype=torch.float32)
    if len(bank) < 2:
        raise ValueError("meta-training needs at least 2 source tasks")
    gen = torch.Generator().manual_seed(config.seed)
    meta = TNP(int(bank.tasks[0][0].shape[-1]), config).float()
    worker = copy.deepcopy(meta)
    outer = torch.optim.Adam(
        [{"params": meta.net_parameters(), "lr": config.outer_lr}, {"params": [meta.init_logits], "lr": config.init_lr}]
    )
    history: list[dict] = []
    with torch_threads(1):
        for step in range(config.meta_steps):
            record = {"step": step, **_outer_step(meta, worker, bank, outer, gen)}
            history.append(record)
            if step % log_every == 0 or step == config.meta_steps - 1:
                _report(logger, record)
    return meta, history

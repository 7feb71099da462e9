"""tune-agent: Bayesian optimisation of PyTorch Lightning jobs that learns from its MLflow history."""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("create_study", "load_study"):
        from agent import api

        return getattr(api, name)
    raise AttributeError(f"module 'agent' has no attribute {name!r}")

"""The registered model's MLflow flavour: a pyfunc around any object with ``predict(rows)``.

MLflow pickles the wrapper with what it wraps (by reference to their modules), so loading the
model needs tune-agent installed where it is loaded: ``mlflow.pyfunc.load_model(uri).predict(rows)``.
"""

from __future__ import annotations

from typing import Any

from mlflow.pyfunc import PythonModel


class ServingPyfunc(PythonModel):
    """``predict`` hands the rows to ``inner.predict`` (:class:`agent.jobs.serving.RawClassifier`)."""

    # MLflow wraps a subclass's predict to validate its type hints, and warns when it has none, as
    # the class is defined; the rows' schema here is the signature logged with the model, so the
    # wrapping is skipped (MLflow's own switch, as its built-in models use)
    _skip_type_hint_validation = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def predict(self, context, model_input, params=None):
        return self.inner.predict(model_input)

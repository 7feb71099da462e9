"""The registered model's MLflow flavour: a pyfunc around any object with ``predict(rows)``.

MLflow pickles the wrapper with what it wraps (by reference to their modules), so loading the
model needs tune-agent installed where it is loaded: ``mlflow.pyfunc.load_model(uri).predict(rows)``.
"""

from __future__ import annotations

from typing import Any

from mlflow.pyfunc import PythonModel


class ServingPyfunc(PythonModel):
    """``predict`` hands the rows to ``inner.predict`` (:class:`agent.ops.models.RawClassifier`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    # no type hints on predict: MLflow reads them as the input schema and warns on every load
    def predict(self, context, model_input, params=None):
        return self.inner.predict(model_input)

#!/usr/bin/env bash
# Starts a tracking server over the embedded store (or the backend set in server.env / the env).
set -euo pipefail
cd "$(dirname "$0")/.."
source mlflow/server.env
exec .venv/bin/mlflow server \
  --backend-store-uri "$MLFLOW_SERVER_BACKEND" \
  --artifacts-destination "$MLFLOW_SERVER_ARTIFACTS" \
  --host "$MLFLOW_SERVER_HOST" --port "$MLFLOW_SERVER_PORT"

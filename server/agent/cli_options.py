"""The options every command that talks to a model API takes (`infra-agent agent`, `eval`)."""

from __future__ import annotations

from typing import Annotated

import typer

BASE_URL_HELP = (
    "The model API's root, e.g. https://api.z.ai/api/paas/v4 or "
    "http://127.0.0.1:8000/v1 (without /chat/completions)."
)
MODEL_HELP = "Model name the API serves, e.g. glm-4.6."

BaseUrlOpt = Annotated[str, typer.Option(help=BASE_URL_HELP)]
ModelOpt = Annotated[str, typer.Option(help=MODEL_HELP)]

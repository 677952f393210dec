"""The options every command that talks to a model API takes (`infra-agent agent`, `eval`)."""

from __future__ import annotations

from typing import Annotated

import typer

BaseUrlOpt = Annotated[
    str,
    typer.Option(
        help="The model API's root, e.g. https://api.z.ai/api/paas/v4 or "
        "http://127.0.0.1:8000/v1 (without /chat/completions)."
    ),
]
ModelOpt = Annotated[str, typer.Option(help="Model name the API serves, e.g. glm-4.6.")]

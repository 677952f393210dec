"""A tiny Llama checkpoint built here, once per session (engine_helpers.py). Nothing is
downloaded: Hugging Face libraries run offline."""

from __future__ import annotations

import os

import pytest
from engine_helpers import build_tiny_checkpoint

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    build_tiny_checkpoint(folder)
    return folder

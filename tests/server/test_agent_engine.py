"""`infra-agent agent` against the built-in engine's OpenAI API: a real engine process on
loopback serving random weights (a checkpoint built here: the engine's own random_weights,
a byte-level BPE tokenizer trained on the server's prompt text, a context long enough for
the system prompt). Whatever the random model says, the run ends by the loop's rules:
no crash, the engine still serving, a transcript, no key in any file."""

from __future__ import annotations

import dataclasses
import json
import secrets

import httpx
import pytest
from engine_process import engine_process
from typer.testing import CliRunner

from infra_agent.server.cli import app

pytest.importorskip(
    "infra_agent.serving.engine.api_server",
    reason="the built-in engine's HTTP API is not in this checkout",
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from infra_agent.server.agent.prompt import RUN_RULES
    from infra_agent.server.prompts import CHECKS
    from infra_agent.serving.engine.config import ModelConfig
    from infra_agent.serving.engine.weights import random_weights

    folder = tmp_path_factory.mktemp("agent-llama")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [RUN_RULES, *(f"{name} {what}" for name, what in CHECKS)] * 4
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=["<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"})
    )
    cfg = ModelConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16384,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=[tok.token_to_id("</s>")],
    )
    (folder / "config.json").write_text(
        json.dumps({"model_type": "llama", **dataclasses.asdict(cfg)})
    )
    save_file(random_weights(cfg, seed=0, dtype=torch.float32), str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def engine(checkpoint):
    with engine_process(
        "--checkpoint",
        str(checkpoint),
        "--model-name",
        "random-agent",
        "--num-blocks",
        "1024",
        "--max-model-len",
        "16384",
        ready_within_s=120,
    ) as started:
        yield started


def test_the_loop_runs_against_the_engine_whatever_the_model_says(engine, workspace, tmp_path):
    url, proc = engine
    key = "sk-engine-" + secrets.token_hex(12)
    transcript = tmp_path / "engine-run.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "agent",
            "--base-url",
            f"{url}/v1",
            "--model",
            "random-agent",
            "--goal",
            "make rmsnorm faster on sm_90a",
            "-w",
            str(workspace),
            "--max-steps",
            "3",
            "--max-completion-tokens",
            "24",
            "--transcript",
            str(transcript),
        ],
        env={"OPENAI_API_KEY": key},
        catch_exceptions=False,
    )
    log = [json.loads(line) for line in transcript.read_text().splitlines()]
    stop = next(e for e in log if e["event"] == "stop")
    # A random model answers with noise (no tool call: the run ends) or, by chance, something
    # that parses as calls (answered as tool errors until the step budget). Never an API error.
    assert stop["reason"] in ("answered", "max_steps"), stop
    assert result.exit_code == (0 if stop["reason"] == "answered" else 3), result.output
    responses = [e for e in log if e["event"] == "model_response"]
    assert responses and all(
        not r["usage"]["estimated"] and r["usage"]["completion_tokens"] <= 24 for r in responses
    )  # the engine's own usage, and max_tokens honoured
    assert "random-agent" in result.stdout and log[-1]["event"] == "summary"
    assert proc.poll() is None and httpx.get(f"{url}/v1/models").status_code == 200  # still serving
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaks == []

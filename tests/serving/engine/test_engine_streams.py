"""The hand-over from the engine thread to asyncio consumers: a consumer that falls behind
gets the tokens that piled up as one merged output, and loses nothing."""

from __future__ import annotations

import asyncio

from infra_agent.serving.engine import EngineArgs, SamplingParams


def test_a_slow_consumer_gets_merged_outputs_with_every_token():
    from infra_agent.serving.engine.async_engine import AsyncEngine
    from infra_agent.serving.engine.llm_engine import LLMEngine

    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    offline = LLMEngine(EngineArgs(num_blocks=64)).generate(["slow reader"], params)[0]
    engine = AsyncEngine(LLMEngine(EngineArgs(num_blocks=64)))
    ids = engine.engine.encode("slow reader")

    async def consume(delay_s: float) -> list:
        outputs = []
        async for out in engine.generate(ids, params, f"req-{delay_s}"):
            outputs.append(out)
            await asyncio.sleep(delay_s)  # the engine thread keeps stepping meanwhile
        return outputs

    try:
        slow = asyncio.run(consume(0.05))
    finally:
        engine.shutdown()
    assert "".join(o.text_delta for o in slow) == offline["text"]
    assert [t for o in slow for t in o.token_ids_delta] == offline["token_ids"]
    assert len(slow) < len(offline["token_ids"])  # some outputs were merged
    assert slow[-1].finished and slow[-1].finish_reason == "length"
    assert not any(o.finished for o in slow[:-1])

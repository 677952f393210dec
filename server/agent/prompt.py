"""The system prompt of an agent run, built from what the server itself tells any MCP
client: its instructions, and its `optimize_kernel` prompt (the hypothesis -> cheapest
check -> verdict loop) for the kernel the goal names, else the check ladder alone.
Only the rules of running unattended are this module's own."""

from __future__ import annotations

import re

from ..prompts import ladder


async def system_prompt(mcp, goal: str, offered: set[str], kernels: list[str], budget: str) -> str:
    """`mcp` is a connected mcp.Client on the server; `kernels` the workspace's kernel names."""
    parts = [mcp.instructions or ""]
    named = [k for k in kernels if re.search(rf"\b{re.escape(k)}\b", goal)]
    prompt_names = {p.name for p in (await mcp.list_prompts()).prompts}
    if len(named) == 1 and "optimize_kernel" in prompt_names:
        result = await mcp.get_prompt("optimize_kernel", {"kernel": named[0], "goal": goal})
        parts += [getattr(m.content, "text", "") for m in result.messages]
    else:
        parts.append(ladder(offered))
    parts.append(RUN_RULES.format(budget=budget))
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


RUN_RULES = """How this run works:
- You run unattended: nobody will answer a question. Work towards the goal with the tools.
- Call several tools in one turn when they are independent (e.g. microbench at two shapes):
  they run concurrently.
- A tool result is the tool's structured output as JSON. A result that starts with "error:"
  is the tool's error message: fix the call and retry, or change approach.
- Budget: {budget}. Calls beyond it are not run.
- When the goal is met, or you cannot make progress, answer WITHOUT a tool call: that answer
  ends the run and is your report. Say what you tried (experiment ids), what each answered,
  and your conclusion."""

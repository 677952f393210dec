"""Scripted eval policies: replies for tests/scripted_model.py's ScriptedModel that read the
conversation (the task's question, the tools' answers so far) and decide the next turn.

    Investigator     checks every impl (check_numerics, compile_kernel for the target), reads
                     the answers and submits what they show, citing them
    Guesser          submits a cause drawn at random, without calling a tool to look
    AlwaysFinds      the investigator, except that "nothing is wrong" is never its answer

A policy decides from the request alone (no state between requests), as a model does.
"""

from __future__ import annotations

import json
import random
import re

from scripted_model import Reply, answer, tool_turn

TARGET = "sm_90a"
KERNEL_CAUSES = (
    "none",
    "stride_assumption",
    "tail_mask",
    "accumulation_precision",
    "unlaunchable_config",
    "nondeterminism",
)
LOW_PRECISION = ("float16", "bfloat16")


class Conversation:
    """What a policy reads off one chat-completions request."""

    def __init__(self, body: dict):
        messages = body["messages"]
        goal = next(m["content"] for m in messages if m["role"] == "user")
        self.kernel = re.search(r"the kernel (\w+)", goal).group(1)
        self.impls = [
            s.strip() for s in re.search(r"implementations \(([^)]*)\)", goal).group(1).split(",")
        ]
        self.goal = goal
        calls = {
            c["id"]: (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
        }
        self.results: list[tuple[str, dict, dict | str]] = []  # (tool, arguments, output or error)
        for m in messages:
            if m["role"] == "tool":
                name, args = calls[m["tool_call_id"]]
                content = m["content"]
                self.results.append(
                    (name, args, content if content.startswith("error") else json.loads(content))
                )

    def ran(self, tool: str) -> list[tuple[dict, dict | str]]:
        return [(a, r) for name, a, r in self.results if name == tool]


class Investigator:
    finds_nothing_allowed = True

    def __call__(self, body: dict) -> Reply:
        talk = Conversation(body)
        if talk.ran("submit_diagnosis"):
            return answer("submitted")(body)
        if not talk.results:
            calls = []
            for impl in talk.impls:
                calls.append(("check_numerics", {"kernel": talk.kernel, "impl": impl, "trials": 1}))
                calls.append(
                    ("compile_kernel", {"kernel": talk.kernel, "impl": impl, "target": TARGET})
                )
            return tool_turn(*calls)(body)
        return tool_turn(("submit_diagnosis", self.diagnose(talk)))(body)

    def diagnose(self, talk: Conversation) -> dict:
        numerics = {a["impl"]: r for a, r in talk.ran("check_numerics")}
        compiles = {a["impl"]: r for a, r in talk.ran("compile_kernel")}
        for impl in talk.impls:
            found = self.cause_of(numerics.get(impl), compiles.get(impl))
            if found is not None:
                cause, evidence, extra = found
                return {
                    "cause": cause,
                    "kernel": talk.kernel,
                    "impl": impl,
                    "experiment_ids": evidence,
                    **extra,
                }
        every = [
            r["experiment_id"]
            for r in (*numerics.values(), *compiles.values())
            if isinstance(r, dict)
        ]
        if self.finds_nothing_allowed:
            return {"cause": "none", "kernel": talk.kernel, "experiment_ids": every}
        # AlwaysFinds: the impl with the largest error "must" be losing precision
        worst = max(
            talk.impls,
            key=lambda i: max(
                (max(c["trial_rel_l2"] or [0]) for c in numerics[i]["cases"]), default=0
            ),
        )
        return {
            "cause": "accumulation_precision",
            "kernel": talk.kernel,
            "impl": worst,
            "experiment_ids": every,
        }

    @staticmethod
    def cause_of(numerics, compiled) -> tuple[str, list[str], dict] | None:
        if isinstance(compiled, dict):
            cannot = [n for n in compiled["notes"] if "cannot launch" in n]
            if cannot:
                warps = compiled["kernels"][0]["num_warps"]
                extra = {"config_key": "num_warps", "number": warps}
                return "unlaunchable_config", [compiled["experiment_id"]], extra
        if not isinstance(numerics, dict):
            return None
        codes = {f["code"] for f in numerics["findings"]}
        cite = [numerics["experiment_id"]]
        if "nondeterministic" in codes:  # a warning: the verdict may still say pass
            return "nondeterminism", cite, {}
        if numerics["verdict"] != "fail":
            return None
        failed = [c for c in numerics["cases"] if c["verdict"] == "fail"]
        if "unwritten_output" in codes:
            extra = {}
            if isinstance(compiled, dict):
                constexprs = compiled["kernels"][0].get("constexprs") or {}
                blocks = [v for k, v in constexprs.items() if "BLOCK" in k]
                if len(blocks) == 1:
                    extra = {"number": blocks[0]}
                    cite.append(compiled["experiment_id"])
            return "tail_mask", cite, extra
        if failed and all(c["layout"] != "as_made" for c in failed):
            return "stride_assumption", cite, {}
        if failed and all(c["dtype"] in LOW_PRECISION for c in failed):
            return "accumulation_precision", cite, {}
        return None


class AlwaysFinds(Investigator):
    finds_nothing_allowed = False


class Guesser:
    """A cause and an impl drawn at random (seeded by the question), no experiment looked at."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def __call__(self, body: dict) -> Reply:
        talk = Conversation(body)
        if talk.ran("submit_diagnosis"):
            return answer("guessed")(body)
        rng = random.Random(f"{self.seed}:{talk.goal}")
        cause = rng.choice(KERNEL_CAUSES)
        guess = {"cause": cause, "kernel": talk.kernel, "impl": rng.choice(talk.impls)}
        if cause == "unlaunchable_config":
            guess.update(config_key="num_warps", number=rng.choice((16, 32, 64, 128)))
        if cause == "tail_mask":
            guess.update(number=rng.choice((64, 128, 256, 512, 1024)))
        return tool_turn(("submit_diagnosis", guess))(body)

"""Scripted eval policies: replies for tests/scripted_model.py's ScriptedModel that read the
conversation (the task's question, the tools' answers so far) and decide the next turn.

    Investigator     kernel tasks: checks every impl (check_numerics, compile_kernel for the
                     target), reads the answers and submits what they show, citing them; where
                     two impls' compiles execute very different work per output element,
                     compiles the heavier against the lighter. Serving tasks: launches
                     yesterday's and today's config and benchmarks today's against yesterday's
                     (serve_benchmark baseline_handle=, the user's traffic); where today's
                     config switched a hot op's kernel impl and TTFT regressed, microbenches
                     today's impl against yesterday's; where no change is to blame but the
                     benchmark's own checks found its load generator waiting for a CPU
                     (client_starved), blames the client. Asked about a
                     deployment: launches it as the question gives it and profiles the overlap
                     the question expects
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
    "partition_numerics",
    "redundant_recompute",
)
SERVING_CAUSES = (
    "none",
    "queueing_max_num_seqs",
    "small_token_budget",
    "prefix_caching_off",
    "slow_kernel",
    "starved_client",
)
SYSTEM_CAUSES = ("none", "gil_held", "starved_client", "queueing_max_num_seqs")
RECOMPUTE_FROM = 2.0  # executed FFMA per output element, one impl over the other: worth a look
LOW_PRECISION = ("float16", "bfloat16")
# serving: the config key each cause sits at, and what serve_benchmark must show for it
KEY_CAUSE = {
    "max_num_seqs": "queueing_max_num_seqs",
    "max_num_batched_tokens": "small_token_budget",
    "enable_prefix_caching": "prefix_caching_off",
}
REGRESSION = "ttft_p50 <= 1.2 * baseline.ttft_p50"  # worse than this, beyond noise: a regression
REGRESSION_PCT = 20
# serve_benchmark's attribution of TTFT: how much it moved, and the phase it names when TTFT and
# that phase moved beyond noise (judge.attribution's words)
TTFT_NAMED = re.compile(r"^TTFT p50 ([+-]\d+)%: .*the (\w+) phase moved most")
CACHE_DROP = 0.1  # a prefix-cache hit rate this much below the baseline's


class Conversation:
    """What a policy reads off one chat-completions request."""

    def __init__(self, body: dict):
        messages = body["messages"]
        goal = next(m["content"] for m in messages if m["role"] == "user")
        kernel = re.search(r"the kernel (\w+)", goal)
        impls = re.search(r"implementations \(([^)]*)\)", goal)
        self.kernel = kernel.group(1) if kernel else None  # None: a serving or deployment question
        self.impls = [s.strip() for s in impls.group(1).split(",")] if impls else []
        # a serving question quotes the configs and the traffic, one JSON object a line
        self.configs = {
            name: json.loads(text)
            for name, text in re.findall(r"^(yesterday|today|traffic): (\{.*\})$", goal, re.M)
        }
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
        if talk.configs:
            return self.serving_turn(talk)(body)
        if talk.kernel is None:
            return self.deployment(talk)(body)
        if not talk.results:
            calls = []
            for impl in talk.impls:
                calls.append(("check_numerics", {"kernel": talk.kernel, "impl": impl, "trials": 1}))
                calls.append(
                    ("compile_kernel", {"kernel": talk.kernel, "impl": impl, "target": TARGET})
                )
            return tool_turn(*calls)(body)
        heavier = self.heavier(talk)
        if heavier is not None:
            return tool_turn(("compile_kernel", heavier))(body)
        return tool_turn(("submit_diagnosis", self.diagnose(talk)))(body)

    def heavier(self, talk: Conversation) -> dict | None:
        """When no answer so far shows a cause, and one impl's compile executes RECOMPUTE_FROM
        times the FFMA per output element of another's: the compile of it against that one
        (the diff names what grew), once."""
        if any("baseline" in a for a, _ in talk.ran("compile_kernel")):
            return None
        numerics = {a["impl"]: r for a, r in talk.ran("check_numerics")}
        compiles = {a["impl"]: r for a, r in talk.ran("compile_kernel")}
        if any(self.cause_of(numerics.get(i), compiles.get(i)) for i in talk.impls):
            return None  # the first answers show a cause already
        ffma = {}
        for a, r in talk.ran("compile_kernel"):
            if isinstance(r, dict) and r.get("kernels"):
                estimate = r["kernels"][0].get("executed_estimate") or {}
                ffma[a["impl"]] = ((estimate.get("per_output") or {}).get("ffma"), r)
        known = {i: v for i, v in ffma.items() if v[0]}
        if len(known) < 2:
            return None
        hi = max(known, key=lambda i: known[i][0])
        lo = min(known, key=lambda i: known[i][0])
        if known[hi][0] < RECOMPUTE_FROM * known[lo][0]:
            return None
        return {
            "kernel": talk.kernel,
            "impl": hi,
            "target": TARGET,
            "baseline": known[lo][1]["experiment_id"],
        }

    @staticmethod
    def deployment(talk: Conversation):
        """Launch the deployment as the question gives it, profile it under the question's load
        with the overlap it expects, and submit what the profile's findings say."""
        launched = talk.ran("launch_serve")
        if not launched:
            args = json.loads(re.search(r"args=(\{[^{}]*\})", talk.goal).group(1))
            return tool_turn(("launch_serve", {"engine": "builtin", "args": args}))
        _, engine = launched[-1]
        profiled = talk.ran("profile")
        last = profiled[-1][1] if profiled else None
        undecided = isinstance(last, dict) and "overlap_undecided" in last["finding_codes"]
        # no profile yet, or one that could not decide (a CPU-starved window): profile (again,
        # with the longer window its finding asks for, at most twice more)
        if isinstance(engine, dict) and (not profiled or (undecided and len(profiled) < 3)):
            a = re.search(r"named range (\S+)\)", talk.goal).group(1)
            b = re.search(r"named ranges (\S+)\)", talk.goal).group(1)
            load = re.search(
                r"(\d+) requests in flight, (\d+)-token prompts, (\d+) output tokens", talk.goal
            )
            return tool_turn(
                (
                    "profile",
                    {
                        "handle": engine["handle"],
                        "duration_s": 3.0 * (1 + len(profiled)),
                        "load_concurrency": int(load.group(1)),
                        "load_input_len": int(load.group(2)),
                        "load_output_len": int(load.group(3)),
                        "overlap": [[a, b]],
                    },
                )
            )
        cited = [r["experiment_id"] for _, r in (*launched, *profiled) if isinstance(r, dict)]
        prof = profiled[-1][1] if profiled else None
        if isinstance(prof, dict) and "gil_contention" in prof["finding_codes"]:
            # the holder of the longest wait the host samples measured
            wait = max(prof["contention"]["waits"], key=lambda w: w["fraction"])
            return tool_turn(
                (
                    "submit_diagnosis",
                    {
                        "cause": "gil_held",
                        "thread": wait["holder"].rsplit(" (", 1)[0],
                        "experiment_ids": [prof["experiment_id"]],
                    },
                )
            )
        return tool_turn(("submit_diagnosis", {"cause": "none", "experiment_ids": cited}))

    def diagnose(self, talk: Conversation) -> dict:
        numerics = {a["impl"]: r for a, r in talk.ran("check_numerics")}
        compiles = {a["impl"]: r for a, r in talk.ran("compile_kernel") if "baseline" not in a}
        against = {a["impl"]: r for a, r in talk.ran("compile_kernel") if "baseline" in a}
        for impl in talk.impls:
            found = self.cause_of(numerics.get(impl), compiles.get(impl), against.get(impl))
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

    def serving_turn(self, talk: Conversation):
        yesterday, today = talk.configs["yesterday"], talk.configs["today"]
        launched = {json.dumps(a["args"], sort_keys=True): r for a, r in talk.ran("launch_serve")}
        if not launched:
            return tool_turn(
                *(("launch_serve", {"engine": "builtin", "args": c}) for c in (yesterday, today))
            )
        y, t = (launched[json.dumps(c, sort_keys=True)] for c in (yesterday, today))
        if isinstance(y, str) or isinstance(t, str):
            return answer(f"an engine did not start: {y if isinstance(y, str) else t}")
        benchmarks = talk.ran("serve_benchmark")
        if not benchmarks:
            workload = {"handle": t["handle"], "baseline_handle": y["handle"]}
            workload |= {"workload": talk.configs["traffic"], "criteria": [REGRESSION]}
            return tool_turn(("serve_benchmark", workload | {"repeats": 5}))
        bench = benchmarks[-1][1]
        if isinstance(bench, str):
            return answer(f"the benchmark failed: {bench}")
        changed = sorted(k for k in {*yesterday, *today} if yesterday.get(k) != today.get(k))
        # a hot op switched to another impl, and a regression: time today's impl against
        # yesterday's at the kernel's own shapes (the cheap, local check), once
        switched = self.switched_ops(yesterday, today)
        if switched and self.regressed_phases(bench) is not None and not talk.ran("microbench"):
            op, before, after = switched[0]
            return tool_turn(("microbench", {"kernel": op, "impl": after, "baseline": before}))
        timed = [(a, r) for a, r in talk.ran("microbench") if isinstance(r, dict)]
        return tool_turn(("submit_diagnosis", self.diagnose_serving(bench, changed, timed)))

    @staticmethod
    def switched_ops(yesterday: dict, today: dict) -> list[tuple[str, str, str]]:
        """(op, yesterday's impl, today's impl) for each hot op the kernels= arg switched."""
        before, after = yesterday.get("kernels") or {}, today.get("kernels") or {}
        return [
            (op, before.get(op, "reference"), impl)
            for op, impl in sorted(after.items())
            if before.get(op, "reference") != impl
        ]

    @staticmethod
    def regressed_phases(bench: dict) -> set[str] | None:
        """None without a regression (the criterion's verdict not contradicted and no
        attribution line of a TTFT rise of 20% or more); else the phases those lines named."""
        named = [m for f in bench["findings"] if (m := TTFT_NAMED.match(f))]
        phases = {m.group(2) for m in named if int(m.group(1)) >= REGRESSION_PCT}
        if bench["criteria"]["answer"] != "contradicted" and not phases:
            return None
        return phases

    def diagnose_serving(
        self, bench: dict, changed: list[str], timed: list[tuple[dict, dict]]
    ) -> dict:
        """A change to blame if the benchmark shows one; else, where its own checks found the
        load generator waiting for a CPU, the client; else nothing."""
        cite = {"experiment_ids": [bench["experiment_id"]]}
        blamed = self.change_to_blame(bench, changed, timed, cite)
        if blamed is not None:
            return blamed
        if any(f.startswith("client_starved:") for f in bench["findings"]):
            return {"cause": "starved_client", **cite}  # the reading is the client's wait
        return self.nothing_found(changed, cite)

    @classmethod
    def change_to_blame(
        cls, bench: dict, changed: list[str], timed: list[tuple[dict, dict]], cite: dict
    ) -> dict | None:
        """Regression or not: the criterion's verdict, or the attribution's TTFT line naming a
        phase (TTFT beyond noise) after a rise of 20% or more; then a switched kernel impl a
        microbench found slower, whether the prefix-cache hit rate fell, or which phase was
        named, and which changed key governs that. None: no change the answers point at."""
        suspects = [k for k in changed if k in KEY_CAUSE]
        phases = cls.regressed_phases(bench)
        if phases is None:
            return None  # within 1.2x, within noise, or undecided
        slower = [(a, r) for a, r in timed if r["verdict"] == "slower"]
        if slower:  # today's impl of a hot op, timed against yesterday's: slower
            a, r = slower[0]
            return {
                "cause": "slow_kernel",
                "config_key": "kernels",
                "kernel": a["kernel"],
                "impl": a["impl"],
                "experiment_ids": [r["experiment_id"], bench["experiment_id"]],
            }
        hit = bench["metrics"].get("prefix_cache_hit_rate")
        base_hit = (bench["baseline_metrics"] or {}).get("prefix_cache_hit_rate")
        if hit is not None and base_hit is not None and base_hit - hit > CACHE_DROP:
            keys = [k for k in suspects if KEY_CAUSE[k] == "prefix_caching_off"]
        else:
            keys = [k for k in suspects if k != "enable_prefix_caching"]
            keys = keys if {"queue", "prefill"} & phases else []
        if len(keys) != 1:  # the tools' answers point at no single change
            return None
        return {"cause": KEY_CAUSE[keys[0]], "config_key": keys[0], **cite}

    def nothing_found(self, changed: list[str], cite: dict) -> dict:
        if self.finds_nothing_allowed:
            return {"cause": "none", **cite}
        # AlwaysFinds: the change "must" be to blame, the key it knows a cause for first
        key = sorted(changed, key=lambda k: k not in KEY_CAUSE)[0]
        return {"cause": KEY_CAUSE.get(key, "queueing_max_num_seqs"), "config_key": key, **cite}

    @staticmethod
    def cause_of(numerics, compiled, against=None) -> tuple[str, list[str], dict] | None:
        if isinstance(against, dict):  # compiled against a lighter impl: what grew, and where
            grew = {d["field"]: d for d in against["diff"]}.get("executed_estimate.per_output.ffma")
            loops = [lp for lp in against["kernels"][0]["loops"] if (lp["trip_count"] or 0) > 1]
            if grew and (grew["ratio"] or 0) >= RECOMPUTE_FROM and loops:
                extra = {"number": loops[0]["trip_count"]}
                return "redundant_recompute", [against["experiment_id"]], extra
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
        split_missed = [
            c
            for c in failed
            if c.get("partition")
            and (c["partition"]["partitioned_vs_reference_rel_l2"] or 0) > c["tolerance_rel_l2"]
        ]
        if split_missed:  # the ranks' combined result misses the FP32 reference
            return "partition_numerics", cite, {}
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
        if talk.configs:  # a serving question: a cause, and one of the keys today's config names
            cause = rng.choice(SERVING_CAUSES)
            key = rng.choice(sorted(talk.configs["today"]))
            return tool_turn(("submit_diagnosis", {"cause": cause, "config_key": key}))(body)
        if talk.kernel is None:  # a deployment: a cause and a thread drawn at random
            guess = {
                "cause": rng.choice(SYSTEM_CAUSES),
                "thread": rng.choice(("MainThread", "prefill-worker", "decode-worker")),
            }
            return tool_turn(("submit_diagnosis", guess))(body)
        cause = rng.choice(KERNEL_CAUSES)
        guess = {"cause": cause, "kernel": talk.kernel, "impl": rng.choice(talk.impls)}
        if cause == "unlaunchable_config":
            guess.update(config_key="num_warps", number=rng.choice((16, 32, 64, 128)))
        if cause == "tail_mask":
            guess.update(number=rng.choice((64, 128, 256, 512, 1024)))
        return tool_turn(("submit_diagnosis", guess))(body)

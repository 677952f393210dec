"""Run a candidate under a launch configuration: {'BLOCK_N': 128, 'num_warps': 4}.

One rule, used by every op that calls agent code under a config (numerics_run, microbench,
compile's launch capture):

- a name the entry function takes as an explicit parameter is passed to it as a keyword
  argument (the impl then derives what depends on it);
- any other name replaces that ``tl.constexpr`` (by name, whether the caller passed it
  positionally or as a keyword) or launch option (LAUNCH_OPTIONS) in every Triton launch the
  call makes: ``JITFunction.run`` and the interpreter's ``InterpretedFunction.run``, reached
  directly or through ``@triton.heuristics``; under ``@triton.autotune`` the tuner's search
  is skipped and its first config runs, with the launch config over it;
- a name that no launch and no entry parameter used is an error (LaunchConfigError) naming
  the launched kernels' constexprs and the entry's parameters.

The config is data from the server (the job payload): names and JSON scalars, passed as
arguments, never evaluated. The launch hooks are installed on the Triton classes once per
job process and act only while a configured call is running (``_ACTIVE``), so two arms of
one timing job can run under two configs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

_ACTIVE: list[Overrides] = []  # the configured call now running (innermost last)
_installed = False


class LaunchConfigError(Exception):
    """A launch_config name nothing used; the message lists what could have used it."""


@dataclass
class Overrides:
    """One config, split between the entry's keyword arguments and the launches'
    constexprs/options, and what each launch had replaced (by kernel name)."""

    config: dict[str, Any]
    entry_params: list[str]
    entry_kwargs: dict[str, Any] = field(default_factory=dict)
    overridden: dict[str, set[str]] = field(default_factory=dict)  # kernel -> names replaced
    constexprs_seen: dict[str, list[str]] = field(default_factory=dict)  # kernel -> its constexprs

    @classmethod
    def of(cls, fn: Callable, config: dict[str, Any] | None) -> Overrides:
        params = _explicit_params(fn)
        config = dict(config or {})
        return cls(
            config=config,
            entry_params=params,
            entry_kwargs={k: v for k, v in config.items() if k in params},
        )

    @property
    def launch_names(self) -> dict[str, Any]:
        """The names the launches get (everything the entry does not take)."""
        return {k: v for k, v in self.config.items() if k not in self.entry_kwargs}

    def rewrite(self, kernel, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """One launch's (args, kwargs) with this config's constexprs and options replaced."""
        name = str(getattr(kernel, "__name__", "?"))
        arg_names, constexprs = kernel_params(kernel)
        self.constexprs_seen[name] = constexprs
        args, kwargs = list(args), dict(kwargs)
        done = self.overridden.setdefault(name, set())
        for key, value in self.launch_names.items():
            if key in constexprs:
                position = arg_names.index(key)
                if position < len(args):
                    args[position] = value
                else:
                    kwargs[key] = value
            elif key in LAUNCH_OPTIONS:
                kwargs[key] = value
            else:
                continue
            done.add(key)
        return tuple(args), kwargs

    def check(self) -> None:
        """Raise when a launch name was used by no launch so far."""
        used = set().union(*self.overridden.values()) if self.overridden else set()
        unused = sorted(set(self.launch_names) - used)
        if not unused:
            return
        if self.constexprs_seen:
            launched = "; ".join(
                f"{k}: constexprs {', '.join(v) or 'none'}" for k, v in self.constexprs_seen.items()
            )
            where = f"the Triton launches it made ({launched}; options {', '.join(LAUNCH_OPTIONS)})"
        else:
            where = "any Triton launch (the call made none: a torch-only entry takes its config as parameters)"
        raise LaunchConfigError(
            f"launch_config names {unused} are not parameters of the entry "
            f"({', '.join(self.entry_params) or 'none'}) nor used by {where}; "
            "fix the names or drop them"
        )

    def applied(self) -> dict:
        """What was applied where, for the tool's answer."""
        return {
            "entry_kwargs": sorted(self.entry_kwargs),
            "overridden": {k: sorted(v) for k, v in self.overridden.items() if v},
        }


def configured(fn: Callable, config: dict[str, Any] | None) -> tuple[Callable, Overrides]:
    """`fn` wrapped to run under `config` (itself when the config is empty), and the record
    of what it applied. Each call raises LaunchConfigError after it returns if a name was
    never used."""
    overrides = Overrides.of(fn, config)
    if not overrides.config:
        return fn, overrides
    install_hooks()
    entry_kwargs = overrides.entry_kwargs

    def call(*args, **kwargs):
        _ACTIVE.append(overrides)
        try:
            out = fn(*args, **entry_kwargs, **kwargs)
        finally:
            _ACTIVE.pop()
        overrides.check()
        return out

    return call, overrides


def kernel_params(kernel) -> tuple[list[str], list[str]]:
    """(every parameter name, the tl.constexpr ones) of a JIT or interpreted Triton function."""
    params = getattr(kernel, "params", None)
    if params is not None:  # JITFunction
        return [p.name for p in params], [p.name for p in params if p.is_constexpr]
    sig = inspect.signature(kernel.fn)
    constexprs = [n for n, p in sig.parameters.items() if _is_constexpr(p.annotation)]
    return list(sig.parameters), constexprs


def _is_constexpr(annotation) -> bool:
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "constexpr"
    return getattr(annotation, "__name__", "") == "constexpr"


def _explicit_params(fn: Callable) -> list[str]:
    """Parameter names a caller can pass by keyword (not *args/**kwargs)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [n for n, p in sig.parameters.items() if p.kind in kinds]


def install_hooks() -> None:
    """Wrap the Triton launch entry points once per process; they rewrite only while a
    configured call runs."""
    global _installed
    if _installed:
        return
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interp
    import triton.runtime.jit as jit

    for cls in (jit.JITFunction, interp.InterpretedFunction):
        original = cls.run

        def run(self, *args, __original=original, **kwargs):
            if _ACTIVE:
                args, kwargs = _ACTIVE[-1].rewrite(self, args, kwargs)
            return __original(self, *args, **kwargs)

        cls.run = run  # type: ignore[method-assign]
    tuner_run = autotuner.Autotuner.run

    def autotuned(self, *args, **kwargs):
        if not _ACTIVE:
            return tuner_run(self, *args, **kwargs)
        # the config decides: no search; the first config, the launch config replaces its values
        return self.fn.run(*args, **{**kwargs, **self.configs[0].all_kwargs()})

    autotuner.Autotuner.run = autotuned  # type: ignore[method-assign]
    _installed = True

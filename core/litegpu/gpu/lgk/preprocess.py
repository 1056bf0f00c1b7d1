"""LGK preprocessor: ``#if``/``#elif``/``#else``/``#for``/``#set``/``#error``/``#fragment`` and ``{{expr}}`` over the
template options."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from .types import KernelTemplateError

# ----------------------------------------------------------------------------------------------
# Preprocessor
# ----------------------------------------------------------------------------------------------

_SAFE_BUILTINS = {
    "range": range, "len": len, "min": min, "max": max, "int": int, "str": str, "abs": abs,
    "enumerate": enumerate, "any": any, "all": all, "zip": zip, "sorted": sorted, "repr": repr,
    "True": True, "False": False, "None": None, "tuple": tuple, "list": list, "float": float,
}
_DIRECTIVE = re.compile(r"^\s*#(if|elif|else|endif|for|endfor|set|error|fragment|endfragment)\b(.*)$")
_FRAGMENT = re.compile(r"^([A-Za-z_]\w*)\s*\(\s*((?:[A-Za-z_]\w*\s*(?:,\s*[A-Za-z_]\w*\s*)*)?)\)$")
_SUBST = re.compile(r"\{\{(.*?)\}\}")


def source_location(name: Any, line: int) -> str:
    """``file:line`` for messages; ``name`` may be a callable mapping a line to that text."""
    return name(line) if callable(name) else f"{name}:{line}"


@functools.lru_cache(maxsize=8192)
def _compiled(expr: str) -> Any:
    # a template's few hundred distinct expressions are evaluated tens of thousands of times by a
    # cold prepare (every #for iteration, every render): compiling each once was most of eval's cost
    return compile(expr.strip(), "<lgk expression>", "eval")


def _peval(expr: str, env: Mapping[str, Any], name: Any, line: int) -> Any:
    try:
        # env as globals so comprehensions see the template variables
        return eval(_compiled(expr), {**env, "__builtins__": _SAFE_BUILTINS})  # noqa: S307 (trusted templates)
    except Exception as e:  # a template bug: say where (the location is built only here: per line it was costly)
        raise KernelTemplateError(f"{source_location(name, line)}: cannot evaluate {expr.strip()!r}: {e}") from e


def preprocess(text: str, env: Mapping[str, Any], name: str = "<template>") -> str:
    """Expand ``#if/#elif/#else/#endif``, ``#for x in ...``/``#endfor``, ``#set x = ...``,
    ``#error msg``, ``#fragment``/``#endfragment`` and ``{{expr}}``, evaluating Python expressions over ``env``.

    ``#fragment name(a, b)`` ... ``#endfragment`` defines ``name`` as a template function: ``{{name(x, y)}}`` is the
    fragment's lines, preprocessed with ``a`` and ``b`` bound to the values of ``x`` and ``y`` (over the template
    variables of the scope where the fragment is defined, as they are at the use, not those of the place it is
    used) and joined into one line, so one piece of kernel
    text (statements, or an expression inside a line) has one home wherever it is repeated under other names.

    Lines removed by directives are kept as blank lines so parse errors point at template lines.
    """
    lines = text.split("\n")
    out: list[str] = []
    expanding: set[str] = set()  # the fragments being expanded (one that uses itself would never end)

    def fragment(fname: str, params: list[str], start: int, scope: dict[str, Any]) -> Callable[..., str]:
        """The template function of the fragment whose body starts at line index ``start``."""

        def expand(*args: Any) -> str:
            if len(args) != len(params):
                raise KernelTemplateError(f"fragment {fname}({', '.join(params)}) takes {len(params)} "
                                          f"argument(s), not {len(args)}")
            if fname in expanding:
                raise KernelTemplateError(f"fragment {fname} uses itself")
            expanding.add(fname)
            mark = len(out)
            try:
                block(start, {**scope, **dict(zip(params, args, strict=True))}, True, ("endfragment",))
            finally:
                expanding.discard(fname)
            produced = [ln.strip() for ln in out[mark:] if ln.strip()]
            del out[mark:]
            return " ".join(produced)

        return expand

    def block(i: int, env: dict[str, Any], emit: bool, stop: tuple[str, ...]) -> tuple[int, str]:
        """Process lines from i until a directive in ``stop``; return (index, directive)."""
        while i < len(lines):
            line = lines[i]
            m = _DIRECTIVE.match(line) if "#" in line else None
            ln = i + 1
            if m is None:
                if emit:
                    line = line.split("//", 1)[0]  # comments go: expanded #for bodies share one line
                    if "{{" in line:
                        line = _SUBST.sub(lambda mm, ln=ln: str(_peval(mm.group(1), env, name, ln)), line)
                    out.append(line)
                else:
                    out.append("")
                i += 1
                continue
            d, arg = m.group(1), m.group(2).strip()
            if d in stop:
                return i, d
            if d == "if":
                out.append("")
                taken = emit and bool(_peval(arg, env, name, ln))
                done = taken
                i, d2 = block(i + 1, env, taken, ("elif", "else", "endif"))
                while d2 != "endif":
                    out.append("")
                    if d2 == "elif":
                        cond = (not done) and emit and bool(_peval(_DIRECTIVE.match(lines[i]).group(2), env, name, i + 1))
                        done = done or cond
                        i, d2 = block(i + 1, env, cond, ("elif", "else", "endif"))
                    else:  # else
                        i, d2 = block(i + 1, env, emit and not done, ("endif",))
                out.append("")
                i += 1
            elif d == "for":
                fm = re.match(r"^([A-Za-z_][\w, ]*)\s+in\s+(.*)$", arg)
                if fm is None:
                    raise KernelTemplateError(f"{source_location(name, ln)}: bad #for: {arg!r}")
                names = [n.strip() for n in fm.group(1).split(",")]
                items = list(_peval(fm.group(2), env, name, ln)) if emit else []
                out.append("")
                start = i + 1
                mark = len(out)
                for it in items:
                    sub = dict(env)
                    if len(names) == 1:
                        sub[names[0]] = it
                    else:
                        sub.update(zip(names, it, strict=True))
                    block(start, sub, True, ("endfor",))
                produced = [ln.strip() for ln in out[mark:] if ln.strip()]
                del out[mark:]
                # the body's extent, found by a dry pass
                end, _ = block(start, env, False, ("endfor",))
                del out[mark:]
                # all iterations on the body's first line, so later lines keep their template numbers
                body = end - start
                if body:
                    out.append(" ".join(produced))
                    out.extend([""] * (body - 1))
                i = end + 1
                out.append("")
            elif d == "set":
                sm = re.match(r"^([A-Za-z_]\w*)\s*=\s*(.*)$", arg)
                if sm is None:
                    raise KernelTemplateError(f"{source_location(name, ln)}: bad #set: {arg!r}")
                if emit:
                    env[sm.group(1)] = _peval(sm.group(2), env, name, ln)
                out.append("")
                i += 1
            elif d == "fragment":
                fm = _FRAGMENT.match(arg)
                params = [p.strip() for p in fm.group(2).split(",") if p.strip()] if fm else []
                if fm is None or len(set(params)) != len(params):
                    raise KernelTemplateError(f"{source_location(name, ln)}: bad #fragment: {arg!r} "
                                              "(write '#fragment name(param, ...)')")
                if emit:
                    if fm.group(1) in env:
                        raise KernelTemplateError(f"{source_location(name, ln)}: #fragment {fm.group(1)}: the name "
                                                  "is taken (a template variable or another fragment)")
                    env[fm.group(1)] = fragment(fm.group(1), params, i + 1, env)
                out.append("")
                # the body is read where it is used: here its lines are blank
                i, _ = block(i + 1, env, False, ("endfragment",))
                out.append("")
                i += 1
            elif d == "error":
                if emit:
                    msg = _SUBST.sub(lambda mm, ln=ln: str(_peval(mm.group(1), env, name, ln)), arg)
                    raise KernelTemplateError(f"{source_location(name, ln)}: {msg}")
                out.append("")
                i += 1
            else:
                raise KernelTemplateError(f"{source_location(name, ln)}: unexpected #{d}")
        if stop:
            raise KernelTemplateError(f"{name}: missing #{'/#'.join(stop)}")
        return i, ""

    block(0, dict(env), True, ())
    return "\n".join(out)

"""A small Dockerfile reader for the image tests: logical instructions (continuations joined,
comments dropped), grouped into stages, with a stage's effective USER/ENV/EXPOSE/ENTRYPOINT
resolved through the stages it is built FROM."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def instructions(text: str) -> list[Instruction]:
    result: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # a comment line, also inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return result


def global_args(path: Path) -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults (what a build without --build-arg
    uses)."""
    found: dict[str, str] = {}
    for ins in instructions(path.read_text(encoding="utf-8")):
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            found[name.strip()] = default.strip()
    return found


def stages(path: Path) -> dict[str, Stage]:
    """The stages by name; a FROM's `${ARG}` is resolved to the global ARG's default."""
    found: dict[str, Stage] = {}
    current: Stage | None = None
    defaults = global_args(path)
    for ins in instructions(path.read_text(encoding="utf-8")):
        if ins.keyword == "ARG" and current is None:
            continue
        if ins.keyword == "FROM":
            words = ins.args.split()
            words = [w for w in words if not w.startswith("--platform")]
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m[1], m[0]), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(found))
            current = found[name] = Stage(name, base)
        else:
            assert current is not None, f"{ins.keyword} before the first FROM"
            current.instructions.append(ins)
    return found


def chain(all_stages: dict[str, Stage], target: str) -> list[Stage]:
    """The stage and the stages it is built on, outermost base first."""
    result = []
    stage: Stage | None = all_stages[target]
    while stage is not None:
        result.append(stage)
        stage = all_stages.get(stage.base)
    return result[::-1]


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if len(words) >= 2 and "=" not in words[0]:  # legacy `ENV KEY value`
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


def effective(all_stages: dict[str, Stage], target: str) -> dict[str, object]:
    user, env, expose, entrypoint, cmd = "", {}, set(), None, None
    for stage in chain(all_stages, target):
        for ins in stage.instructions:
            if ins.keyword == "USER":
                user = ins.args
            elif ins.keyword == "ENV":
                env.update(env_pairs(ins.args))
            elif ins.keyword == "EXPOSE":
                expose.update(p.split("/")[0] for p in ins.args.split())
            elif ins.keyword == "ENTRYPOINT":
                entrypoint = ins.args
            elif ins.keyword == "CMD":
                cmd = ins.args
    return {"user": user, "env": env, "expose": expose, "entrypoint": entrypoint, "cmd": cmd}


def exec_form(args: str) -> list[str] | None:
    """The argv of a JSON (exec-form) ENTRYPOINT/CMD, or None for the shell form."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None

"""docker/Dockerfile read as a build plan, and that plan carried out without a Docker engine.

Our build machines have no Docker engine, so the image tier builds what an image would hold
from the Dockerfile itself: each stage's COPY lines copy the repository's files into a clean
directory standing for the image's WORKDIR, its ``pip install`` lines run into a clean
virtualenv in that directory, its ENV lines become the processes' environment and its USER
line the uid they run as. A file the Dockerfile forgets to COPY is missing here too, a
dependency the lock file lacks is missing from the virtualenv, and a write outside the image's
writable paths fails as it would for the image's user.

A ``COPY --from=<stage>`` builds that stage the same way in a directory of its own and copies
from it: the native stage compiles the record decoder with the machine's cargo (``make
install``'s prerequisite, as the Rust image's toolchain is the stage's), its ``python3 -m venv``
standing for the build's own virtualenv.

What cannot be carried out is named, not guessed: a RUN command this module does not know
fails the build (``UnknownStep``), so a new step in the Dockerfile is either taught here or
seen to be skipped.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from tests.support import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


#: RUN commands the image build runs and this one does not, and why each is safe to skip:
#: the system packages are the machine's (make test's prerequisites install Java and Maven),
#: the user is the machine's (``ensure_user`` runs the Dockerfile's own line), the image's
#: writable directories are made by ``ImageBuild.writable`` with the owner the chown names,
#: and removing a build cache changes nothing the processes read.
SKIPPED = ("apt-get", "groupadd", "useradd", "mkdir", "chown", "rm")


class UnknownStep(AssertionError):
    """A RUN command the image tier does not know how to carry out (or to skip)."""


def context_ignored(relative: str, text: str | None = None) -> bool:
    """Whether the build context leaves out ``relative`` (a repository path), by .dockerignore's
    patterns: each matches the path from the context's root, a ``**/`` pattern at any depth,
    and what a pattern leaves out leaves out everything under it (as Docker reads them; ``!``
    exceptions are not used, and refused here)."""
    lines = (DOCKERIGNORE.read_text() if text is None else text).splitlines()
    patterns = [ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("#")]
    if any(p.startswith("!") for p in patterns):
        raise UnknownStep(".dockerignore: exceptions (!) are not read by the image tier")
    parts = PurePosixPath(relative).parts
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):
            rest = pattern[3:]
            tails = ["/".join(parts[i : n + 1]) for n in range(len(parts)) for i in range(n + 1)]
            if any(fnmatchcase(tail, rest) for tail in tails):
                return True
        elif any(fnmatchcase(prefix, pattern) for prefix in prefixes):
            return True
    return False


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str
    line: int  # where it starts in the Dockerfile (1-based)


@dataclass
class Stage:
    name: str
    base: str  # the FROM image, or the name of an earlier stage
    instructions: list[Instruction] = field(default_factory=list)


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        pending.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            keyword, _, args = " ".join(pending).partition(" ")
            found.append(Instruction(keyword.upper(), args.strip(), start))
            pending = []
    return found


def stages(text: str | None = None) -> dict[str, Stage]:
    """Every ``FROM <base> AS <name>`` stage with its own instructions, in order."""
    result: dict[str, Stage] = {}
    current: Stage | None = None
    for ins in instructions(DOCKERFILE.read_text() if text is None else text):
        if ins.keyword == "FROM":
            base, _, name = ins.args.partition(" AS ")
            current = Stage(name.strip(), base.strip())
            result[current.name] = current
        elif current is not None:
            current.instructions.append(ins)
    return result


def lineage(target: str, text: str | None = None) -> list[Stage]:
    """The stages an image of ``target`` is built from, base first (``FROM app AS spark``
    holds everything the app stage holds)."""
    found = stages(text)
    chain = [found[target]]
    while chain[0].base in found:
        chain.insert(0, found[chain[0].base])
    return chain


def shell_commands(run: str) -> list[list[str]]:
    """A RUN line's commands, split at ``&&`` (the only operator our Dockerfile uses)."""
    commands: list[list[str]] = [[]]
    for word in shlex.split(run):
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def user_line(text: str | None = None) -> list[list[str]]:
    """The RUN commands that create the image's user (groupadd, useradd)."""
    for stage in stages(text).values():
        for ins in stage.instructions:
            if ins.keyword == "RUN" and "useradd" in ins.args:
                return shell_commands(ins.args)
    raise AssertionError("the Dockerfile creates no user (useradd)")


def ensure_user(uid: int) -> None:
    """The image's user exists on this machine, as the Dockerfile creates it (run as root).

    Spark's JVM asks the system for its user's name (Hadoop's login), so a uid without a
    passwd entry, as some platforms assign, fails there: the image gives its user one, and so
    does this machine."""
    try:
        pwd.getpwuid(uid)
        return
    except KeyError:
        pass
    for command in user_line():
        subprocess.run(command, check=True, capture_output=True, text=True)
    pwd.getpwuid(uid)


def interpreter() -> str:
    """A Python 3.11 the image's user can run: the image's own is /usr/local/bin/python; here
    the interpreter of the test run if every directory above it is open to others (a pyenv
    under /root is not), else the system's."""
    import sys

    base = Path(sys.base_prefix)
    if all(os.stat(p).st_mode & 0o005 == 0o005 for p in [base, *base.parents]):
        return str(base / "bin" / "python3.11")
    system = shutil.which("python3.11", path="/usr/local/bin:/usr/bin")
    if system is None:
        raise AssertionError("no Python 3.11 the image's user can run: install python3.11")
    return system


@dataclass
class ImageBuild:
    """One image's file set and virtualenv under ``root``; ``build`` runs a stage's steps.

    Image paths (WORKDIR, ENV values, the chown'd directories) map to directories under
    ``root``: /srv -> root/srv, /data -> root/data, and so on."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)
    user: tuple[int, int] | None = None  # the USER line's uid:gid, once a stage sets one
    owned: dict[str, str] = field(default_factory=dict)  # image path -> chown's owner
    workdir: str = "/"
    seconds: dict[str, float] = field(default_factory=dict)  # how long each stage took
    log: Callable[[str], None] = print
    #: The builds of the stages a ``COPY --from`` names, each under its own directory.
    others: dict[str, ImageBuild] = field(default_factory=dict)

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def cwd(self) -> Path:
        return self.host(self.workdir)

    def host(self, image_path: str) -> Path:
        """Where an absolute image path lives in this build."""
        return self.root / PurePosixPath(image_path).relative_to("/")

    def build(self, stage: Stage, run_env: Mapping[str, str]) -> None:
        """Carry out ``stage``'s instructions on top of what earlier stages left."""
        started = time.monotonic()
        if not self.venv.exists():  # the base image's Python: a clean virtualenv
            subprocess.run([interpreter(), "-m", "venv", str(self.venv)], check=True)
        for ins in stage.instructions:
            self._step(ins, run_env)
        self.seconds[stage.name] = time.monotonic() - started

    def writable(self) -> None:
        """The directories the image makes and hands to its user (mkdir + chown; the chown
        only as root, where the processes run as the image's user)."""
        if os.geteuid() == 0 and self.user is not None:
            ensure_user(self.user[0])
        for image_path, owner in self.owned.items():
            path = self.host(image_path)
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                entry = pwd.getpwnam(owner.partition(":")[0])
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def process_env(self) -> dict[str, str]:
        """The ENV lines' values, image paths mapped into this build."""
        return {
            key: str(self.host(value)) if value.startswith("/") else value
            for key, value in self.env.items()
        }

    def _step(self, ins: Instruction, run_env: Mapping[str, str]) -> None:
        if ins.keyword == "WORKDIR":
            self.workdir = ins.args
            self.cwd.mkdir(parents=True, exist_ok=True)
        elif ins.keyword == "COPY":
            *sources, target = shlex.split(ins.args)
            if sources and sources[0].startswith("--from="):
                built = self._stage_build(sources[0].removeprefix("--from="), ins, run_env)
                for source in sources[1:]:
                    self._copy(source, target, origin=built.host(source))
                return
            for source in sources:
                self._copy(source, target)
        elif ins.keyword == "ENV":
            for pair in shlex.split(ins.args):
                key, _, value = pair.partition("=")
                self.env[key] = value
        elif ins.keyword == "USER":
            user, _, group = ins.args.partition(":")
            uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
            self.user = (uid, int(group) if group.isdigit() else uid)
        elif ins.keyword == "RUN":
            for command in shell_commands(ins.args):
                self._run(command, ins, run_env)
        elif ins.keyword not in ("VOLUME", "EXPOSE", "CMD", "LABEL"):
            raise UnknownStep(f"Dockerfile line {ins.line}: {ins.keyword} is not carried out")

    def _stage_build(self, name: str, ins: Instruction, run_env: Mapping[str, str]) -> ImageBuild:
        """The build of stage ``name`` (built once, in ``root/stage-<name>``)."""
        built = self.others.get(name)
        if built is None:
            if name not in stages():
                raise UnknownStep(f"Dockerfile line {ins.line}: COPY --from={name} (not a stage)")
            built = self.others[name] = ImageBuild(self.root / f"stage-{name}", log=self.log)
            for stage in lineage(name):
                built.build(stage, run_env)
            self.seconds.update({f"{name}/{k}": v for k, v in built.seconds.items()})
        return built

    def _copy(self, source: str, target: str, origin: Path | None = None) -> None:
        """COPY ``source`` (a repository path, or ``origin`` in another stage's build)."""
        context = origin is None
        if origin is None:
            origin = ROOT / source
        if not origin.exists() or (context and context_ignored(source.strip("/"))):
            raise AssertionError(f"COPY {source}: no such file in the build context or stage")
        dest = self.cwd / target

        def ignored(folder: str, names: list[str]) -> set[str]:
            """What the build context (.dockerignore) leaves out of a repository folder."""
            if not context:
                return {n for n in names if n == "__pycache__"}
            under = Path(folder).relative_to(ROOT)
            return {n for n in names if context_ignored(str(under / n))}

        if origin.is_dir():
            shutil.copytree(origin, dest, ignore=ignored, dirs_exist_ok=True)
        else:
            if target.endswith("/"):
                dest.mkdir(parents=True, exist_ok=True)
                dest = dest / origin.name
            shutil.copy2(origin, dest)

    def _run(self, command: list[str], ins: Instruction, run_env: Mapping[str, str]) -> None:
        if command[0] == "mkdir" or command[0] == "chown":
            if command[0] == "chown":
                owner, *paths = command[1:]
                self.owned.update((p, owner) for p in paths)
            return
        if command[0] in SKIPPED:
            return
        if command[:3] == ["python3", "-m", "venv"]:
            return  # the stage's virtualenv: the build's own (made by ``build``) stands for it
        if command[:2] == ["pip", "install"]:
            # The machine's pip cache stands in for PyPI: the same files, checked against the
            # same hashes, without downloading them again in every run.
            args = [a for a in command[2:] if a != "--no-cache-dir"]
            argv = [self.python, "-m", "pip", "install", "--quiet", *args]
        elif command[:2] == ["python", "-m"]:
            argv = [self.python, *command[1:]]
        else:
            raise UnknownStep(f"Dockerfile line {ins.line}: RUN {shlex.join(command)}")
        self.log(f"image: RUN {shlex.join(command)}")
        env = {**run_env, **self.process_env(), "PATH": f"{self.venv / 'bin'}:{os.environ['PATH']}"}
        done = subprocess.run(argv, cwd=self.cwd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(
                f"Dockerfile line {ins.line}: RUN {shlex.join(command)} failed "
                f"({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )

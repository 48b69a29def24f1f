"""README.md and docs/*.md name only repository paths, modules and `amf` commands that exist.

Why: the docs are where a newcomer starts, and a moved module silently turns a sentence into a dead end. This
test reads the Markdown (no rendering, no network) and checks what it names against the tree and against the
command tables of amf_ros/cli.py (imported, never run).

What counts as a reference (the rule, so that a failure is never a matter of taste):

* Where: inline code spans (`...`), Markdown link targets ``[text](target)`` and, in prose, words that start
  with one of ``ROOT_PREFIXES``; fenced code blocks only for ``amf`` commands (their paths are often the user's
  own: ``~/octo_ckpt``, ``runs/...``).
* Repository paths: a whitespace-separated token of a code span that starts with one of ``ROOT_PREFIXES``
  (amf_ros/, test/, config/, launch/, docs/, scripts/, msg/, srv/, action/, requirements/, .ci/), or is a module
  path relative to amf_ros/ (``runtime/policy_server.py``: its first folder is a subpackage of amf_ros and it
  ends in ``.py`` or ``/``). Trailing punctuation and a ``:line`` / ``::test`` suffix are dropped; ``<name>``
  placeholders and ``*`` match anything (at least one file must match).
* ROS names: ``msg/X``, ``srv/X``, ``action/X`` with a capitalised X, and the type names ``amf_ros/X``,
  ``amf_ros/srv/X`` (``amf_ros/srv/NextTask``) are interfaces (``srv/NextTask.srv``; ``amf_ros/X``: any of
  msg/, srv/, action/); a lower-case one
  (``action/applied``) is a topic name and not a file.
* A path in another repository is written ``repo:path`` (``octo:scripts/train.py``) and is not checked.
* Link targets that are not URLs or anchors: relative to the Markdown file's folder (as GitHub resolves them).
* Dotted module names: a code-span token starting with ``amf_ros.`` (``amf_ros.ros.client.AMFClient``): the
  longest prefix that is a module or package must exist, and the next name, if any, must be defined at that
  module's top level (read with ``ast``; generated ``amf_ros.msg/srv/action`` names map to msg/, srv/, action/).
* ``amf`` commands: ``amf WORD`` where a command starts (the beginning of a code span or of a line of a fenced
  block, after a ``$`` prompt, ``&&``, ``;``, ``|`` or ``(``): WORD must be a key of ``cli.COMMANDS`` or
  ``bench``, and ``amf bench NAME`` needs NAME in ``cli.BENCHMARKS``; upper-case words (``amf COMMAND``,
  ``amf bench NAME``) are placeholders. README's command table must also list every registered command and
  benchmark.

A failure lists every broken reference as ``file:line: reference (why)``.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "amf_ros"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ROOT_PREFIXES = ("amf_ros/", "test/", "config/", "launch/", "docs/", "scripts/", "msg/", "srv/", "action/",
                 "requirements/", ".ci/")
# amf_ros subpackages a module path may start with (`runtime/policy_server.py`): the layers of docs/contracts.md,
# plus whatever folders the package has today.
SUBPACKAGES = {"core", "policies", "data", "robots", "envs", "console", "training", "bringup", "runtime", "ros",
               "loop", "bench"} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
INTERFACES = {"msg": ".msg", "srv": ".srv", "action": ".action"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# `amf WORD` where a command starts: the beginning of a span or line (after a `$ ` prompt), or after && ; | ( $(
_AMF = re.compile(r"(?:^|&&|;|\||\()[ \t]*(?:\$[ \t]+)?amf[ \t]+([A-Za-z][\w-]*)(?:[ \t]+([A-Za-z][\w-]*))?")
_STRIP = ",.;:)(\"'!?"


def _lines(doc: Path) -> list[tuple[int, str, bool]]:
    """(line number, text, inside a fenced code block) of every line of ``doc``."""
    out, fenced = [], False
    for number, text in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(text):
            fenced = not fenced
            continue
        out.append((number, text, fenced))
    return out


def _spans(text: str) -> list[str]:
    return [m.group(2).strip() for m in _SPAN.finditer(text)]


def _clean(token: str) -> str:
    token = re.sub(r"'s$", "", token.strip(_STRIP))  # docs/amf-core.md's
    token = re.sub(r"::[\w\[\]-]+$", "", token)  # test/x.py::test_name
    token = re.sub(r":[\d,-]+$", "", token)  # path.py:117-121
    return token.rstrip(_STRIP)


def _as_repo_path(token: str) -> str | None:
    """The repository-relative path ``token`` names under the rule of the module docstring, else None."""
    ros_type = re.fullmatch(r"amf_ros/(?:(msg|srv|action)/)?([A-Z]\w*)", token)
    if ros_type:  # a ROS type name: amf_ros/srv/NextTask, amf_ros/StateVector (msg/, srv/ or action/)
        kinds = [ros_type.group(1)] if ros_type.group(1) else list(INTERFACES)
        paths = [f"{kind}/{ros_type.group(2)}{INTERFACES[kind]}" for kind in kinds]
        return next((p for p in paths if (REPO / p).is_file()), paths[0])
    top, _, rest = token.partition("/")
    if top in INTERFACES and rest and "/" not in rest and "." not in rest:
        # msg/TaskStatus is an interface; a lower-case name (action/applied) is a topic name, not a file
        return f"{top}/{rest}{INTERFACES[top]}" if rest[0].isupper() else None
    if token.startswith(ROOT_PREFIXES):
        return token
    if rest and top in SUBPACKAGES and (token.endswith((".py", "/")) or "<" in token or "*" in token):
        return f"amf_ros/{token}"
    return None


def _path_problem(rel: str, base: Path = REPO) -> str:
    """"" when ``rel`` (relative to ``base``) exists, else why not."""
    rel = rel.split("#", 1)[0]
    if not rel:
        return ""
    pattern = re.sub(r"<[^>]*>", "*", rel)
    if "*" in pattern or "?" in pattern:
        return "" if any(base.glob(pattern.rstrip("/"))) else "no file matches"
    path = base / rel
    if rel.endswith("/"):
        return "" if path.is_dir() else "no such folder"
    return "" if path.exists() else "no such file"


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _module_problem(dotted: str) -> str:
    """"" when ``amf_ros.a.b[.attr]`` names an existing module (and a top-level name in it), else why not."""
    parts = dotted.split(".")
    if len(parts) >= 3 and parts[1] in INTERFACES:  # generated: amf_ros.msg.TaskStatus -> msg/TaskStatus.msg
        iface = REPO / parts[1] / (parts[2] + INTERFACES[parts[1]])
        return "" if iface.is_file() else f"no interface {iface.relative_to(REPO)}"
    if len(parts) == 2 and parts[1] in INTERFACES:
        return ""
    module: Path | None = None
    depth = 0
    for k in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:k])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                module, depth = candidate, k
                break
        if module is not None:
            break
    if module is None:
        return "no such module"
    if depth == len(parts):
        return ""
    name = parts[depth]
    if module.name == "__init__.py" and (module.parent / name).is_dir():
        return "no such module"
    if name in _top_level_names(module):
        return ""
    return f"{'.'.join(parts[:depth])} has no module or top-level name {name!r}"


def _cli_tables() -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    from amf_ros import cli

    return cli.COMMANDS, cli.BENCHMARKS


def _command_problem(word: str, arg: str | None) -> str:
    commands, benchmarks = _cli_tables()
    if word.isupper():
        return ""
    if word == "bench":
        if arg is None or arg.isupper() or arg.startswith("-"):
            return ""
        return "" if arg in benchmarks else f"no benchmark {arg!r} in amf_ros/cli.py BENCHMARKS"
    return "" if word in commands else f"no command {word!r} in amf_ros/cli.py COMMANDS"


def broken_references(docs: list[Path] = DOCS) -> list[str]:
    """``file:line: reference (why)`` for every reference in ``docs`` that does not resolve."""
    problems: list[str] = []
    for doc in docs:
        where = doc.relative_to(REPO)
        for number, text, fenced in _lines(doc):
            code = [text] if fenced else _spans(text)
            for chunk in code:
                for m in _AMF.finditer(chunk):
                    why = _command_problem(m.group(1), m.group(2))
                    if why:
                        problems.append(f"{where}:{number}: `{m.group(0).strip()}` ({why})")
            if fenced:
                continue
            for span in code:
                for raw in span.split():
                    token = _clean(raw)
                    if token.startswith("amf_ros.") and re.fullmatch(r"[\w.]+", token):
                        why = _module_problem(token)
                    else:
                        rel = _as_repo_path(token)
                        why = _path_problem(rel) if rel is not None else ""
                    if why:
                        problems.append(f"{where}:{number}: `{token}` ({why})")
            prose = _LINK.sub("]", _SPAN.sub(" ", text))
            for raw in prose.split():
                token = _clean(raw.strip("*_"))
                rel = _as_repo_path(token) if token.startswith(ROOT_PREFIXES) else None
                why = _path_problem(rel) if rel is not None else ""
                if why:
                    problems.append(f"{where}:{number}: {token} ({why})")
            for m in _LINK.finditer(text):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                why = _path_problem(target, doc.parent)
                if why:
                    problems.append(f"{where}:{number}: link ({target}) ({why})")
    return problems


def test_docs_name_only_existing_paths_modules_and_commands() -> None:
    problems = broken_references()
    assert not problems, f"{len(problems)} broken references in README.md / docs/*.md:\n" + "\n".join(problems)


def test_readme_command_table_lists_every_registered_command() -> None:
    """README's `amf` command table names every command and every benchmark cli.py registers."""
    commands, benchmarks = _cli_tables()
    lines = [t for _, t, fenced in _lines(REPO / "README.md") if not fenced and t.startswith("| `amf ")]
    listed = {m.group(1) for t in lines for m in [re.match(r"\| `amf ([\w-]+)", t)] if m}
    bench_row = next((t for t in lines if t.startswith("| `amf bench NAME`")), "")
    listed_benchmarks = set(_spans(bench_row.split("|")[2])) if bench_row else set()
    missing = sorted(set(commands) - listed) + [f"bench {b}" for b in sorted(set(benchmarks) - listed_benchmarks)]
    assert not missing, f"README.md's `amf` command table does not list: {missing}"


def test_checker_finds_what_it_should() -> None:
    """The rule itself: broken paths, modules and commands are reported with file:line, real ones are not."""
    sample = REPO / "docs" / ".test_docs_sample.md"
    sample.write_text(
        "ok: `config/sim.yaml`, `runtime/policy_server.py:12`, `amf_ros/bringup/params/<node>.py`, `msg/TaskStatus`,"
        " `amf_ros.paths.workspace_root`, `amf up config/sim.yaml`, `amf bench faults`, [c](contracts.md)\n"
        "bad: `config/nope.yaml`, `runtime/nope.py`, `amf_ros.paths.nope`, `amf nope`, `amf bench nope`, [x](x.md)\n"
        "```bash\namf bench also-nope --out runs/x   # runs/x is not checked in fenced blocks\n```\n",
        encoding="utf-8")
    try:
        problems = broken_references([sample])
    finally:
        sample.unlink()
    assert all(p.startswith("docs/.test_docs_sample.md:") for p in problems), problems
    assert [p.split(":")[1] for p in problems] == ["2"] * 6 + ["4"], problems
    for needle in ("config/nope.yaml", "runtime/nope.py", "amf_ros.paths.nope", "amf nope", "amf bench nope",
                   "(x.md)", "amf bench also-nope"):
        assert any(needle in p for p in problems), (needle, problems)


NODES_WITH_PARAMETERS = ("policy_server", "task_selector", "demo_recorder", "operator_console", "scripted_teleop",
                         "sim_bridge", "teleop", "widowx_driver")


def test_every_node_parameter_table_is_the_schema() -> None:
    """Each node's parameters appear in docs/*.md as exactly the table its schema describes (names, types, defaults,
    descriptions: `amf_ros.bringup.params.describe`), so a parameter added, renamed or re-described in code cannot
    leave the docs behind."""
    from amf_ros.bringup.params import describe, schema

    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md")))
    stale = [node for node in NODES_WITH_PARAMETERS if describe(schema(node)) not in docs]
    assert not stale, (f"the parameter table of {stale} in docs/*.md differs from the schema; the table it should "
                       f"be:\n{describe(schema(stale[0]))}")

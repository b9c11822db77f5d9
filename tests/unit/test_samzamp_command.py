"""The ``samzamp`` command: its table of subcommands, the old scripts as aliases that write exactly what
their subcommands write, every command's help, ``samzamp check`` and shell completion.

The commands run in this process (their ``main``, output captured) where many runs are needed, and
as subprocesses (the installed console scripts, ``bin/``, ``python -m``) where the wiring is the point.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

import pytest
from bad_configs import CASES, Case

from samzamp import __version__
from samzamp.cli import main as samzamp
from samzamp.cli.common import LOG_LEVELS, new_parser, parser_actions
from samzamp.cli.completion import Spec, bash_script, parser_spec, samzamp_spec, zsh_script

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
WORD_COUNT = str(ROOT / "configs" / "word-count.toml")
BIN = Path(sys.executable).parent  # where pip installed the console scripts
TIMEOUT_S = 60

# The commands that take a job config, and what else each needs so that only the config can be wrong
# (a store that is not configured, a factor equal to the job's: refused before anything connects).
CONFIG_COMMANDS = {
    "run": [],
    "check": [],
    "drain": [],
    "compact-changelog": ["--store", "s", "--output", "out"],
    "restore-stores": ["--store", "s"],
    "rebucket-stores": ["--from-factor", "1"],
}
ALIASED_CONFIG_COMMANDS = [name for name in CONFIG_COMMANDS if name in samzamp.ALIASES.values()]
# A bad argument for every command (each rejects an unknown option).
BAD_ARGUMENT = ["--no-such-option"]


def _module(name: str) -> ModuleType:
    return importlib.import_module(samzamp.COMMANDS[name].module)


def _alias_of(name: str) -> str:
    [alias] = [a for a, n in samzamp.ALIASES.items() if n == name]
    return alias


Call = Callable[[], int]


@pytest.fixture
def run_in_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[[Call], tuple[int, str, str]]:
    """Call a command's main here: (exit code, stdout, stderr). argparse's exits are exit codes too."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # setup() puts the cwd on it
    monkeypatch.setattr(faulthandler, "enable", lambda *a, **k: None)  # the container's; pytest has its own

    def call(command: Call) -> tuple[int, str, str]:
        try:
            code = command()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return call


def _subprocess(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=cwd
    )


# --------------------------------------------------------------------------- the table


def test_help_lists_every_command_and_alias(run_in_process: Callable[[Call], tuple[int, str, str]]) -> None:
    code, out, _ = run_in_process(lambda: samzamp.main(["--help"]))
    assert code == 0
    listed = re.findall(r"^  (\S+)\s{2,}", out.split("commands:\n")[1].split("\n\n")[0], re.M)
    assert listed == list(samzamp.COMMANDS)
    for alias, name in samzamp.ALIASES.items():
        assert re.search(rf"^  {alias}\s+samzamp {name}$", out, re.M), alias


def test_every_command_module_runs_as_samzamp_name_and_exposes_build_parser() -> None:
    for name, command in samzamp.COMMANDS.items():
        module = _module(name)
        # An alias calls main() with its default prog: it must be the subcommand's name.
        prog = f"samzamp {name}"
        assert prog == module.PROG, command.module
        assert isinstance(module.build_parser(f"samzamp {name}"), argparse.ArgumentParser)


def test_every_alias_script_runs_its_subcommands_module() -> None:
    scripts = {
        ep.name: ep.value
        for ep in entry_points(group="console_scripts")
        if ep.dist is not None and ep.dist.name == "samzamp"
    }
    assert scripts["samzamp"] == "samzamp.cli.main:main"
    assert set(scripts) == {"samzamp", *samzamp.ALIASES}
    for alias, name in samzamp.ALIASES.items():
        module = samzamp.COMMANDS[name].module
        assert scripts[alias] == f"{module}:main", alias
        wrapper = (ROOT / "bin" / alias).read_text()
        assert re.search(rf'^exec "\$py" -m {re.escape(module)} "\$@"$', wrapper, re.M), alias


def test_an_unknown_command_is_one_line_and_exit_2(run_in_process: Callable[[Call], tuple[int, str, str]]) -> None:
    code, _, err = run_in_process(lambda: samzamp.main(["runn", "job.toml"]))
    assert code == 2
    assert err == (
        f"samzamp: error: unknown command 'runn': choose one of {', '.join(samzamp.COMMANDS)} (see samzamp --help)\n"
    )


def test_python_m_samzamp_and_the_console_script_run() -> None:
    version = _subprocess(sys.executable, "-m", "samzamp", "--version")
    assert (version.returncode, version.stdout) == (0, f"samzamp {__version__}\n"), version.stderr
    checked = _subprocess(BIN / "samzamp", "check", WORD_COUNT)
    assert checked.returncode == 0, checked.stderr
    assert "job          word-count (id 1)" in checked.stdout


# --------------------------------------------------------------------------- aliases = subcommands


def _config_argv(case: Case, tmp_path: Path, name: str) -> list[str]:
    return [str(case.write(tmp_path)), *CONFIG_COMMANDS[name], *case.args]


@pytest.mark.parametrize("name", ALIASED_CONFIG_COMMANDS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_an_alias_and_its_subcommand_fail_alike_on_every_bad_config(
    run_in_process: Callable[[Call], tuple[int, str, str]], tmp_path: Path, case: Case, name: str
) -> None:
    argv = _config_argv(case, tmp_path, name)
    as_alias = run_in_process(lambda: _module(name).main(argv))  # what the console script calls
    as_subcommand = run_in_process(lambda: samzamp.main([name, *argv]))
    assert as_alias == as_subcommand
    code, out, err = as_subcommand
    assert code == 2, err
    assert out == ""
    # Every line is the subcommand's: an old prefix (samzamp-container:) in one message fails here.
    assert err.startswith(f"samzamp {name}: "), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("name", list(samzamp.COMMANDS))
def test_an_alias_and_its_subcommand_reject_a_bad_argument_alike(
    run_in_process: Callable[[Call], tuple[int, str, str]], name: str
) -> None:
    as_alias = run_in_process(lambda: _module(name).main(BAD_ARGUMENT))
    as_subcommand = run_in_process(lambda: samzamp.main([name, *BAD_ARGUMENT]))
    assert as_alias == as_subcommand
    assert as_subcommand[0] == 2
    assert as_subcommand[2].startswith(f"samzamp {name}: error: "), as_subcommand


@pytest.mark.parametrize("name", list(CONFIG_COMMANDS))
@pytest.mark.parametrize("case", CASES[::5], ids=[c.id for c in CASES[::5]])
def test_every_message_uses_the_prog_it_is_given(
    run_in_process: Callable[[Call], tuple[int, str, str]], tmp_path: Path, case: Case, name: str
) -> None:
    # samzamp NAME passes its prog down: a message that used the module's constant would not say it.
    code, _, err = run_in_process(lambda: _module(name).main(_config_argv(case, tmp_path, name), prog="probe"))
    assert code == 2
    assert err.startswith("probe: "), err


def test_drain_says_its_prog_on_every_line(run_in_process: Callable[[Call], tuple[int, str, str]]) -> None:
    code, _, err = run_in_process(lambda: _module("drain").main([WORD_COUNT, "--timeout", "0"], prog="probe"))
    assert code == 2
    assert err == "probe: error: --timeout must be > 0, got 0 (see probe --help)\n"


def test_the_installed_scripts_and_bin_write_the_same_as_samzamp(tmp_path: Path) -> None:
    [case] = [c for c in CASES if c.id == "task-class-not-importable"]
    config = case.write(tmp_path)
    commands: dict[str, list[str | Path]] = {
        "samzamp-container": [BIN / "samzamp-container", config],
        "bin/samzamp-container": [ROOT / "bin" / "samzamp-container", config],
        "samzamp run": [BIN / "samzamp", "run", config],
        "python -m samzamp run": [sys.executable, "-m", "samzamp", "run", config],
        "samzamp-drain": [BIN / "samzamp-drain", config],
        "samzamp drain": [BIN / "samzamp", "drain", config],
    }
    # At once: each is a Python start-up, and they do not share anything.
    procs = {
        how: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for how, argv in commands.items()
    }
    seen = {}
    for how, proc in procs.items():
        out, err = proc.communicate(timeout=TIMEOUT_S)
        seen[how] = (proc.returncode, out, err)
    run = seen["samzamp run"]
    assert run[0] == 2
    assert run[2].startswith(f"samzamp run: config error: {case.key}: "), run
    assert {how: s for how, s in seen.items() if "drain" not in how} == dict.fromkeys(
        ("samzamp-container", "bin/samzamp-container", "samzamp run", "python -m samzamp run"), run
    )
    assert seen["samzamp-drain"] == seen["samzamp drain"]
    assert seen["samzamp drain"][2] == run[2].replace("samzamp run:", "samzamp drain:", 1)


# --------------------------------------------------------------------------- help


def _help(run_in_process: Callable[[Call], tuple[int, str, str]], call: Call) -> str:
    code, out, err = run_in_process(call)
    assert code == 0, err
    return out


@pytest.mark.parametrize("name", list(samzamp.COMMANDS))
def test_every_help_shows_an_example_and_the_exit_codes(
    run_in_process: Callable[[Call], tuple[int, str, str]], name: str
) -> None:
    text = _help(run_in_process, lambda: samzamp.main([name, "--help"]))
    assert text.startswith(f"usage: samzamp {name} ")
    examples = text.split("\nexamples:\n")[1].split("\n\n")[0].splitlines()
    assert examples
    assert any(line.strip().startswith(f"samzamp {name}") or f"<(samzamp {name}" in line for line in examples)
    codes = text.split("\nexit codes:\n")[1]
    assert re.match(r"  0    \S", codes), codes
    assert set(map(int, re.findall(r"^  (\d+) ", codes, re.M))) == set(_module(name).EXIT_CODES)
    if "--set KEY=VALUE" in text:
        assert re.search(r"--set KEY=VALUE\s+override a config key; repeat it", text), text
    if name in samzamp.ALIASES.values():
        assert _help(run_in_process, lambda: _module(name).main(["--help"])) == text  # the alias's


def test_help_shows_defaults(run_in_process: Callable[[Call], tuple[int, str, str]]) -> None:
    text = _help(run_in_process, lambda: samzamp.main(["drain", "--help"]))
    assert re.search(r"--timeout S\s+with --wait: give up after S seconds \(default: 300\.0\)", text), text


@pytest.mark.parametrize("name", list(samzamp.ALIASES.values()))
def test_version_is_the_one_version_for_an_alias_too(
    run_in_process: Callable[[Call], tuple[int, str, str]], name: str
) -> None:
    assert run_in_process(lambda: _module(name).main(["--version"])) == (0, f"samzamp {__version__}\n", "")


# --------------------------------------------------------------------------- check


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_check_accepts_the_shipped_configs(
    run_in_process: Callable[[Call], tuple[int, str, str]], config: Path
) -> None:
    code, out, err = run_in_process(lambda: samzamp.main(["check", str(config)]))
    assert (code, err) == (0, "")
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines()[:-1])
    assert set(rows) >= {"job", "inputs", "stores", "pool size", "coordinator"}
    assert rows.keys() & {"task.class", "app.class"}
    assert out.splitlines()[-1] == f"samzamp check: {config} is valid (nothing was connected to)"


def test_check_summarises_what_the_job_would_run(run_in_process: Callable[[Call], tuple[int, str, str]]) -> None:
    # ZooKeeper and a broker that are not there: check connects to neither.
    argv = [
        "check",
        WORD_COUNT,
        "--set",
        "systems.kafka.bootstrap.servers=127.0.0.1:9",
        "--set",
        "job.coordinator.factory=zk",
        "--set",
        "job.coordinator.zk.connect=127.0.0.1:9",
        "--set",
        "job.container.thread.pool.size=2",
        "--set",
        "stores.counts.factory=lmdb",
        "--set",
        "stores.counts.changelog=kafka.counts-log",
        "--set",
        "stores.counts.key.serde=string",
        "--set",
        "stores.counts.msg.serde=long",
    ]
    code, out, err = run_in_process(lambda: samzamp.main(argv))
    assert (code, err) == (0, "")
    assert out.splitlines()[:-1] == [
        "job          word-count (id 1)",
        "task.class   samzamp.examples.word_count:WordCountTask",
        "inputs       kafka.lines",
        "stores       counts (changelog kafka.counts-log)",
        "pool size    2 (2 worker processes)",
        "coordinator  zk (ZooKeeper 127.0.0.1:9)",
    ]


WORD_COUNT_APP = str(ROOT / "configs" / "word-count-app.toml")


@pytest.mark.parametrize(
    ("config", "override", "line"),
    [
        (WORD_COUNT, "task.class=samzamp.examples.word_count:NoSuchTask", "samzamp check: config error: task.class: "),
        (
            WORD_COUNT,
            "task.class=collections:OrderedDict",
            "samzamp check: config error: task.class: 'collections:OrderedDict' must subclass",
        ),
        (WORD_COUNT, "task.comit.ms=5000", "samzamp check: config error: task.comit.ms: unknown key"),
        (WORD_COUNT_APP, "app.class=nowhere:App", "samzamp check: config error: app.class: "),
        # Found only when the task class of the graph is made, as a start makes it: check makes it too.
        (
            WORD_COUNT_APP,
            "app.class=high_level_apps:AsyncAfterWindow",
            "samzamp check: config error: app.class: map operator 'word-count-app-1-map-1' is an async def after window",
        ),
    ],
    ids=["no-such-task", "not-a-task", "typo", "no-such-app", "async-after-window"],
)
def test_check_rejects_a_bad_class_or_key_with_exit_2(
    run_in_process: Callable[[Call], tuple[int, str, str]], config: str, override: str, line: str
) -> None:
    code, out, err = run_in_process(lambda: samzamp.main(["check", config, "--set", override]))
    assert code == 2
    assert out == ""
    assert err.startswith(line), err
    assert err.count("\n") == 1, err


# --------------------------------------------------------------------------- completion


def _with_nested_command(spec: Spec) -> Spec:
    # A command with subcommands, as `checkpoints show|set` is built: the script must read them.
    p = new_parser("samzamp checkpoints", "checkpoints")
    sub = p.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show")
    show.add_argument("config")
    show.add_argument("--task")
    show.add_argument("--json", action="store_true")
    put = sub.add_parser("set")
    put.add_argument("config")
    put.add_argument("--from", dest="source", required=True)
    put.add_argument("--format", choices=["samza", "json"])
    return Spec(spec.options, spec.valued, spec.positionals, {**spec.commands, "checkpoints": parser_spec(p)})


QUERIES: list[tuple[str, set[str]]] = [
    ("samzamp ''", set(samzamp.COMMANDS) | {"checkpoints"}),
    ("samzamp dr", {"drain"}),
    ("samzamp run --log-l", {"--log-level"}),
    ("samzamp run --log-level ''", set(LOG_LEVELS)),
    ("samzamp run job.toml --log-format j", {"json"}),
    ("samzamp run ''", set()),  # the config: the shell completes file names
    ("samzamp run job.toml --set ''", set()),  # a value: anything
    ("samzamp drain job.toml --timeout 5 --w", {"--wait"}),
    ("samzamp completion ''", {"bash", "zsh"}),
    ("samzamp checkpoints ''", {"show", "set"}),
    ("samzamp checkpoints show job.toml --", {"--help", "--task", "--json"}),
    ("samzamp checkpoints set --format ''", {"samza", "json"}),
    ("samzamp-container --se", {"--set"}),
    ("samzamp-drain job.toml --w", {"--wait"}),
    ("samzamp-compact-changelog --o", {"--output", "--overwrite"}),
]


def _option_queries() -> list[tuple[str, set[str]]]:
    # Every option of every command completes after the command (from its own parser, read here).
    out = []
    for name in samzamp.COMMANDS:
        options = {o for a in parser_actions(_module(name).build_parser()) for o in a.option_strings}
        out.append((f"samzamp {name} --", {o for o in options if o.startswith("--")}))
    return out


def _complete_in(shell: str, script: str, queries: list[str], tmp_path: Path) -> list[set[str]]:
    path = tmp_path / f"completion.{shell}"
    path.write_text(script)
    lines = []
    if shell == "zsh":
        lines += ["autoload -U compinit && compinit -u -d " + str(tmp_path / "zcompdump")]
    lines += [f"source {path}"]
    for query in queries:
        # The function complete (bash) or bashcompinit (zsh) registered for the command's name.
        lines += [
            f"COMP_WORDS=({query}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))",
            f"{_function_of(query)}; printf '%s ' \"${{COMPREPLY[@]}}\"; echo",
        ]
    r = subprocess.run([shell, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return [set(line.split()) for line in r.stdout.splitlines()]


def _function_of(query: str) -> str:
    command = query.split()[0]
    return "_samzamp" + "".join(ch if ch.isalnum() else "_" for ch in command.removeprefix("samzamp"))


def test_bash_completion_completes_commands_options_values_and_nested_commands(tmp_path: Path) -> None:
    spec = _with_nested_command(samzamp_spec())
    queries = [*QUERIES, *_option_queries()]
    got = _complete_in("bash", bash_script(spec, samzamp.ALIASES), [q for q, _ in queries], tmp_path)
    assert dict(zip([q for q, _ in queries], got, strict=True)) == dict(queries)


def test_bash_completion_registers_samzamp_and_every_alias(tmp_path: Path) -> None:
    path = tmp_path / "completion.bash"
    path.write_text(bash_script(samzamp_spec(), samzamp.ALIASES))
    r = subprocess.run(
        ["bash", "-c", f"source {path}; complete -p"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True
    )
    for command in ["samzamp", *samzamp.ALIASES]:
        assert f"complete -o default -F {_function_of(command)} {command}\n" in r.stdout


def test_samzamp_completion_prints_the_scripts(run_in_process: Callable[[Call], tuple[int, str, str]]) -> None:
    spec = samzamp_spec()
    assert run_in_process(lambda: samzamp.main(["completion", "bash"])) == (
        0,
        bash_script(spec, samzamp.ALIASES),
        "",
    )
    code, out, _ = run_in_process(lambda: samzamp.main(["completion", "zsh"]))
    assert (code, out) == (0, zsh_script(spec, samzamp.ALIASES))
    assert out.startswith(f"#compdef samzamp {' '.join(samzamp.ALIASES)}\n")
    code, _, err = run_in_process(lambda: samzamp.main(["completion", "fish"]))
    assert code == 2
    assert err.startswith("samzamp completion: error: argument shell: invalid choice: 'fish'")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_offers_the_same_candidates(tmp_path: Path) -> None:
    # zsh's bashcompinit hands COMPREPLY to compadd, which does the prefix matching: the candidates
    # here are every word that fits the position.
    spec = _with_nested_command(samzamp_spec())
    queries = {
        "samzamp ''": set(samzamp.COMMANDS) | {"checkpoints"},
        "samzamp run --log-level ''": set(LOG_LEVELS),
        "samzamp checkpoints ''": {"show", "set"},
        "samzamp completion ''": {"bash", "zsh"},
        "samzamp run ''": set(),
    }
    got = _complete_in("zsh", zsh_script(spec, samzamp.ALIASES), list(queries), tmp_path)
    assert dict(zip(queries, got, strict=True)) == queries
    [container] = _complete_in("zsh", zsh_script(spec, samzamp.ALIASES), ["samzamp-container --"], tmp_path)
    assert {"--set", "--log-level", "--log-format", "--version"} <= container


# --------------------------------------------------------------------------- docs/cli.md


def test_the_cli_page_lists_every_command_and_alias() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    covered = re.findall(r"<!-- not run: (\S+)::(\w+) ", page)
    assert len(covered) == page.count("```sh")  # every command-line block names the test that runs it
    for path, test in covered:
        assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.M), (path, test)
    for name, command in samzamp.COMMANDS.items():
        assert f"| `samzamp {name}` | {command.summary} |" in page, name
    for alias, name in samzamp.ALIASES.items():
        assert f"| `{alias}` | `samzamp {name}` |" in page, alias

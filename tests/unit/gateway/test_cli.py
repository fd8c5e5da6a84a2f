"""``thinkgate`` command line: help for every command, the settings list generated from ``Settings``, ``--version``,
the simulator's markers and ``--tools``, the banner's store and upstream descriptions."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from importlib import metadata
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.app import cli
from gateway.app.settings import DESCRIPTIONS, Settings
from gateway.dialects.urls import display_url
from state.factory import describe_store
from thinkgate_sim import scenarios
from thinkgate_sim.app import SimConfig, create_sim_app
from thinkgate_sim.compat import Minter as CompatMinter
from thinkgate_sim.compat import plan as compat_plan
from thinkgate_sim.gemini import plan_parts

ROOT = Path(__file__).resolve().parents[3]
SETTINGS_SOURCE = (ROOT / "gateway" / "app" / "settings.py").read_text()
READ_BY_SETTINGS = {"GATEWAY_" + n for n in re.findall(r'get\("([A-Z0-9_]+)"\)', SETTINGS_SOURCE)}


def help_of(*argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def listed_settings(text: str) -> dict[str, str]:
    """Variable -> its line, from the help's settings section."""
    section = text.split("settings (environment variables", 1)[1]
    return {m[1]: m[0] for m in re.finditer(r"^  (GATEWAY_[A-Z0-9_]+)  .*$", section, re.M)}


def test_serve_help_lists_every_setting_settings_py_reads(capsys: pytest.CaptureFixture[str]) -> None:
    listed = listed_settings(help_of("serve", capsys=capsys))
    assert set(listed) == READ_BY_SETTINGS
    assert len(READ_BY_SETTINGS) == len(dataclasses.fields(Settings))
    assert set(DESCRIPTIONS) == {f.name for f in dataclasses.fields(Settings)}, "a setting without its help line"
    defaults = Settings()
    for name, line in listed.items():
        field = name.removeprefix("GATEWAY_").lower()
        assert DESCRIPTIONS[field] in line
        value = getattr(defaults, field)
        shown = re.search(r"\[default: (.*)\]$", line)[1]  # type: ignore[index]
        if field == "secret":
            assert value not in line and shown == "built-in dev value"
        elif value in (None, "", frozenset()):
            assert shown == "unset"
        else:
            assert shown == (str(value).lower() if isinstance(value, bool) else str(value)), line


def test_the_configuration_reference_lists_every_setting() -> None:
    table = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `(GATEWAY_[A-Z0-9_]+)` \|", table, re.M))
    assert documented == READ_BY_SETTINGS


def test_every_setting_the_help_lists_is_one_from_env_reads() -> None:
    """The variable names come from the fields; each must be the one ``from_env`` reads for that field."""
    for f in dataclasses.fields(Settings):
        name = Settings.env_name(f.name)
        assert name in READ_BY_SETTINGS, name
    some = {"GATEWAY_STATE_MAX_TURNS": "7", "GATEWAY_LOG_FORMAT": "json", "GATEWAY_DRAIN_DELAY_S": "1.5"}
    s = Settings.from_env(some)
    assert (s.state_max_turns, s.log_format, s.drain_delay_s) == (7, "json", 1.5)


@pytest.mark.parametrize("command", [(), ("serve",), ("sim",), ("demo",)])
def test_every_command_has_help_with_defaults(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(*command, capsys=capsys)
    assert text.startswith("usage: thinkgate")
    parser = cli.build_parser()
    if command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[command[0]]
        assert parser.description
    for action in parser._actions:
        assert action.help, f"{action.option_strings or action.dest} has no help"
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            assert f"(default: {action.default})" in " ".join(text.split()), action.option_strings


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"thinkgate {metadata.version('thinkgate')}"


def test_sim_help_and_readme_list_every_marker(capsys: pytest.CaptureFixture[str]) -> None:
    handled = set(re.findall(r'name == "(\w+)"', inspect.getsource(scenarios.parse_scenario)))
    documented = {re.match(r"\[\[sim:(\w+)", marker)[1] for marker, _ in scenarios.MARKERS}  # type: ignore[index]
    assert documented == handled
    text = " ".join(help_of("sim", capsys=capsys).split())
    readme = (ROOT / "README.md").read_text()
    table = re.search(r"<!-- sim-markers:begin -->\n(.*?)<!-- sim-markers:end -->", readme, re.S)
    assert table
    for marker, meaning in scenarios.MARKERS:
        assert f"{marker} {' '.join(meaning.split())}" in text
        assert f"| `{marker}` | {meaning} |" in table[1]
    assert "--tools N" in text


TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def test_sim_tools_default_applies_to_requests_that_declare_tools() -> None:
    with_tools = {"tools": TOOLS}
    assert scenarios.scenario_of(with_tools, "hi", 2).tools == 2
    assert scenarios.scenario_of({}, "hi", 2).tools == 0  # no tool to call
    assert scenarios.scenario_of(with_tools, "hi [[sim:tools=0]]", 2).tools == 0  # the marker wins
    assert scenarios.scenario_of(with_tools, "hi [[sim:tools=3]]", 0).tools == 3
    chat = {"model": "deepseek-reasoner", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]}
    from thinkgate_sim.gemini_rules import ThoughtSigner

    signer = ThoughtSigner(b"k" * 32)
    assert compat_plan("deepseek", chat, CompatMinter(b"k" * 32), signer, 1)[1] == "tool_calls"
    assert compat_plan("deepseek", chat, CompatMinter(b"k" * 32), signer, 0)[1] == "stop"
    gemini = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
              "tools": [{"functionDeclarations": [{"name": "get_weather"}]}]}
    assert any("functionCall" in p for p in plan_parts(gemini, "gemini-3-pro-preview", signer, "r", 1))
    assert not any("functionCall" in p for p in plan_parts(gemini, "gemini-3-pro-preview", signer, "r", 0))


@pytest.mark.parametrize("tools", [0, 1])
async def test_sim_tools_through_the_simulator_app(tools: int) -> None:
    app = create_sim_app(SimConfig(tools=tools))
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        resp = await client.post("/v1/messages", content=orjson.dumps(body), headers={"x-api-key": "k"})
    assert resp.status_code == 200
    assert resp.json()["stop_reason"] == ("tool_use" if tools else "end_turn")


def test_cli_sets_sim_tools() -> None:
    args = cli.build_parser().parse_args(["sim", "--tools", "2"])
    assert args.tools == 2 and cli.build_parser().parse_args(["sim"]).tools == 0


@pytest.mark.parametrize(("url", "shown"), [
    (None, "backend=memory (embedded, this process only)"),
    ("redis://:hunter2-password@redis.internal:6380/2",
     "backend=redis scheme=redis host=redis.internal port=6380 db=2 password=<redacted>"),
    ("rediss://thinkgate:p%40ss@[fd00::1]:6390/0",
     "backend=redis scheme=rediss host=fd00::1 port=6390 db=0 user=thinkgate password=<redacted>"),
    ("redis://localhost", "backend=redis scheme=redis host=localhost port=6379 db=0"),
    ("redis+cluster://:pw@a:7000,b:7001", "backend=redis-cluster scheme=redis+cluster nodes=a:7000,b:7001 "
                                          "password=<redacted>"),
    ("redis+sentinel://s1:26379,s2:26379/mymaster/3",
     "backend=redis-sentinel scheme=redis+sentinel sentinels=s1:26379,s2:26379 service=mymaster db=3"),
])
def test_describe_store_names_it_without_the_password(url: str | None, shown: str) -> None:
    assert describe_store(url) == shown
    assert "hunter2" not in describe_store(url) and "p%40ss" not in describe_store(url)


def test_display_url_leaves_out_credentials_and_query() -> None:
    assert display_url("https://user:secret@openrouter.ai/api/v1?key=abc") == "https://openrouter.ai/api/v1"
    assert display_url("http://127.0.0.1:8090") == "http://127.0.0.1:8090"


def test_upstream_urls_name_every_configured_upstream() -> None:
    s = Settings.from_env({"GATEWAY_OPENAI_BASE_URL": "https://openrouter.ai/api/v1",
                           "GATEWAY_ROUTES": "deepseek-=deepseek@https://api.deepseek.com/v1"})
    assert s.upstream_urls() == {"anthropic": "https://api.anthropic.com",
                                 "gemini": "https://generativelanguage.googleapis.com",
                                 "openai": "https://openrouter.ai/api/v1", "deepseek": "https://api.deepseek.com/v1"}


def test_the_readme_names_every_option_of_every_command() -> None:
    """Issue 34 item 10: the README's command table left out sim's --host, --bound-models and --binding-not-enforced;
    serve's help said nothing of PROMETHEUS_MULTIPROC_DIR or OTEL_*. Each command's options, read from its parser,
    are in the README's row for it, and serve's help names the other variables it reads."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("serve", "sim"):
        row = next(line for line in readme.splitlines() if line.startswith(f"| `thinkgate {name} "))
        flags = {o for a in sub.choices[name]._actions for o in a.option_strings
                 if o.startswith("--") and o != "--help"}
        assert {f for f in flags if f not in row} == set(), name
    epilog = sub.choices["serve"].epilog or ""
    assert "PROMETHEUS_MULTIPROC_DIR" in epilog and "OTEL_" in epilog

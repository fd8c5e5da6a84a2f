"""Settings come from GATEWAY_* variables and never show their secrets."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest

from gateway.app.settings import DEFAULT_SECRET, Settings, SettingsError
from tests.process_fixtures import free_port
from tests.redis_fixtures import RedisServer


def test_from_env_reads_every_documented_variable() -> None:
    s = Settings.from_env({
        "GATEWAY_ANTHROPIC_BASE_URL": "http://up", "GATEWAY_MAX_BODY_BYTES": "10",
        "GATEWAY_REDIS_URL": "redis://:hunter2@db:6379/0", "GATEWAY_SECRET": "s3cret-value-0123456789abcdef012",
        "GATEWAY_STATE_TTL_SECONDS": "5", "GATEWAY_STATE_MAX_TURNS": "7", "GATEWAY_STORE_TIMEOUT_MS": "9",
        "GATEWAY_STATE_MACHINE_ENABLED": "false", "GATEWAY_UNVERIFIABLE_THINKING": "text",
        "GATEWAY_FIX_THINKING_PARAMS": "no", "GATEWAY_READ_TIMEOUT_S": "1.5", "GATEWAY_KEEP_PREFIX": "false",
    })
    assert (s.anthropic_base_url, s.max_body_bytes, s.state_ttl_seconds, s.state_max_turns) == ("http://up", 10, 5, 7)
    assert (s.store_timeout_ms, s.state_machine_enabled, s.unverifiable_thinking) == (9, False, "text")
    assert s.fix_thinking_params is False and s.read_timeout_s == 1.5
    assert s.keep_prefix is False and Settings.from_env({}).keep_prefix is True


def test_the_benchmarks_switch_continuations_off_by_name() -> None:
    assert Settings.from_env({}).continuations_off == frozenset()
    off = Settings.from_env({"GATEWAY_CONTINUATIONS_OFF": "splice, carried_sanitize"}).continuations_off
    assert off == {"splice", "carried_sanitize"}


def test_the_tenant_label_bound_is_read() -> None:
    assert Settings.from_env({}).metrics_tenants == 20
    assert Settings.from_env({"GATEWAY_METRICS_TENANTS": "0"}).metrics_tenants == 0


def test_secrets_are_redacted_in_repr_and_str() -> None:
    s = Settings.from_env({"GATEWAY_REDIS_URL": "redis://:hunter2@db:6379/0",
                           "GATEWAY_SECRET": "s3cret-value-0123456789abcdef012"})
    for text in (repr(s), str(s), f"{s}"):
        assert "hunter2" not in text and "s3cret-value" not in text
        assert "<redacted>" in text


@pytest.mark.parametrize(("var", "value"), [("GATEWAY_MAX_BODY_BYTES", "lots"),
                                            ("GATEWAY_STATE_MACHINE_ENABLED", "maybe"),
                                            ("GATEWAY_UNVERIFIABLE_THINKING", "forge"),
                                            ("GATEWAY_GEMINI_SIGNATURE_BYPASS", "forged-signature"),
                                            ("GATEWAY_CONTINUATIONS_OFF", "splice,memo"),
                                            ("GATEWAY_METRICS_TENANTS", "-1"), ("GATEWAY_METRICS_TENANTS", "all")])
def test_bad_values_are_refused(var: str, value: str) -> None:
    with pytest.raises(SettingsError):
        Settings.from_env({var: value})


@pytest.mark.parametrize(("value", "bypass"), [(None, "skip_thought_signature_validator"),
                                               ("skip_thought_signature_validator", "skip_thought_signature_validator"),
                                               ("context_engineering_is_the_way_to_go",
                                                "context_engineering_is_the_way_to_go"),
                                               ("off", None)])
def test_gemini_signature_bypass_takes_the_documented_values_or_off(value: str | None, bypass: str | None) -> None:
    s = Settings.from_env({} if value is None else {"GATEWAY_GEMINI_SIGNATURE_BYPASS": value})
    assert s.gemini_bypass == bypass


def test_an_undocumented_bypass_value_is_refused_by_name() -> None:
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"GATEWAY_GEMINI_SIGNATURE_BYPASS": "Skip_Thought_Signature_Validator"})
    assert str(e.value) == ("GATEWAY_GEMINI_SIGNATURE_BYPASS must be one of skip_thought_signature_validator, "
                            "context_engineering_is_the_way_to_go (the documented bypass values) or off")


@pytest.mark.parametrize("url", ["localhost:6390", "http://localhost:6379", "redis//localhost"])
def test_a_malformed_store_url_is_one_line_at_startup(url: str) -> None:
    """Not a traceback from the first worker that opens the store (issue 22, item 5): the same rule the store
    factory applies (``state.factory.check_store_url``)."""
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"GATEWAY_REDIS_URL": url, "GATEWAY_SECRET": "s" * 32})
    assert str(e.value).startswith("GATEWAY_REDIS_URL: unsupported store URL scheme") and "\n" not in str(e.value)
    for good in ("redis://localhost:6379/0", "rediss://h:1", "redis+cluster://a:1,b:2", "redis+sentinel://h:1/m"):
        assert Settings.from_env({"GATEWAY_REDIS_URL": good}).redis_url == good


@pytest.mark.process
def test_a_malformed_store_url_stops_the_server_with_one_line() -> None:
    env = {**os.environ, "GATEWAY_REDIS_URL": "localhost:6390", "GATEWAY_SECRET": "s" * 32}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "thinkgate: GATEWAY_REDIS_URL: unsupported store URL scheme 'localhost' (use redis://, rediss://, "
        "redis+cluster://, redis+sentinel:// or nothing for in-memory)"]


@pytest.mark.process
def test_a_store_that_refuses_the_credentials_stops_the_server_with_one_line(redis_server: RedisServer) -> None:
    """A wrong Redis password started "ready" and served every request statelessly (issue 22, item 5)."""
    userinfo = "tg-probe:wrong-password"
    with redis_server.client() as c:
        c.execute_command("ACL", "SETUSER", "tg-probe", "on", ">right-password", "~*", "+@all")
    url = redis_server.url.replace("redis://", f"redis://{userinfo}@")
    env = {**os.environ, "GATEWAY_REDIS_URL": url, "GATEWAY_SECRET": "s" * 32}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("thinkgate: GATEWAY_REDIS_URL: the Redis server refused the credentials in the URL")
    assert "password" not in line.split("URL", 1)[1].lower()  # never the password itself


@pytest.mark.process
@pytest.mark.parametrize("files", ["ssl_ca_certs=/nonexistent/ca.crt",
                                   "ssl_certfile=/nonexistent/tls.crt&ssl_keyfile=/nonexistent/tls.key"])
def test_tls_files_the_url_names_but_cannot_be_read_stop_the_server_with_one_line(files: str) -> None:
    """A CA bundle or client certificate the URL names that is not there (a Secret key misspelt, a mount missing)
    was a traceback at start; it is a configuration error, named by its URL parameter."""
    env = {**os.environ, "GATEWAY_REDIS_URL": f"rediss://127.0.0.1:{free_port()}/0?{files}", "GATEWAY_SECRET": "s" * 32}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-800:]
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("thinkgate: GATEWAY_REDIS_URL: cannot read the TLS files it names (")
    assert files.split("=", 1)[0] in line and "No such file or directory" in line


@pytest.mark.process
@pytest.mark.parametrize("host", ["nohost", "redis.example.invalid"])
def test_a_store_host_that_does_not_resolve_stops_the_server_with_one_line(host: str) -> None:
    """``redis://nohost:1`` started, answered /readyz 200 and served every request statelessly (issue 32, item 3)."""
    env = {**os.environ, "GATEWAY_REDIS_URL": f"redis://:secret-pw@{host}:1/0", "GATEWAY_SECRET": "s" * 32}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-800:]
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"thinkgate: GATEWAY_REDIS_URL: the Redis host '{host}' does not resolve")
    assert "secret-pw" not in line


@pytest.mark.process
def test_an_unreachable_store_at_start_is_an_outage_not_a_configuration_error() -> None:
    """The probe does not stop a start whose Redis is down: the gateway serves statelessly until it is back."""
    from state.probe import check_credentials

    asyncio.run(check_credentials(f"redis://127.0.0.1:{free_port()}/0"))  # returns: no error


def test_a_short_secret_is_one_line_at_startup() -> None:
    """``GATEWAY_SECRET=short`` was accepted (issue 22, item 5): an HMAC key under 32 bytes can be guessed offline
    from any tenant prefix it made. The dev default stays the check_production rule's (refused with Redis)."""
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"GATEWAY_SECRET": "short"})
    assert str(e.value).startswith("GATEWAY_SECRET must be at least 32 bytes") and "short" not in str(e.value)
    assert Settings.from_env({"GATEWAY_SECRET": "x" * 32}).secret == "x" * 32
    assert Settings.from_env({}).secret == Settings.from_env({"GATEWAY_SECRET": DEFAULT_SECRET}).secret


@pytest.mark.process
def test_a_short_secret_stops_the_server_with_one_line() -> None:
    env = {**os.environ, "GATEWAY_SECRET": "short"}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "thinkgate: GATEWAY_SECRET must be at least 32 bytes (it keys every tenant prefix; e.g. openssl rand -hex 32)"]


@pytest.mark.parametrize("name", ["GATEWAY_BODY_TIMEOUT_S", "GATEWAY_KEEP_ALIVE_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_client_timeout_that_would_refuse_every_client_is_refused_at_startup(name: str, value: str) -> None:
    """``GATEWAY_BODY_TIMEOUT_S=0`` would answer every request 408 (and a keep-alive of 0 close every connection):
    an operator's slip that looks like an outage, so it is a one-line error at start instead."""
    with pytest.raises(SettingsError) as e:
        Settings.from_env({name: value})
    assert str(e.value) == f"{name} must be a number of seconds above 0"
    assert Settings.from_env({name: "2.5"}) is not None


# A password in an upstream base URL: long enough to be a real one, and findable in any output it leaks into.
URL_PASSWORD = "url-password-0123456789abcdef0123456789"
URL_WITH_USERINFO = f"http://proxy-user:{URL_PASSWORD}@127.0.0.1:9/v1"


@pytest.mark.parametrize(("var", "value"), [
    ("GATEWAY_ANTHROPIC_BASE_URL", URL_WITH_USERINFO),
    ("GATEWAY_GEMINI_BASE_URL", URL_WITH_USERINFO),
    ("GATEWAY_OPENAI_BASE_URL", URL_WITH_USERINFO),
    ("GATEWAY_ROUTES", f"gpt-=copilot@{URL_WITH_USERINFO}"),
    ("GATEWAY_ROUTES", f"deepseek-=responses@{URL_WITH_USERINFO},gpt-=openai"),
])
def test_an_upstream_url_with_credentials_is_refused_in_one_line_without_them(var: str, value: str) -> None:
    """User info in a base URL would go to the upstream for every tenant, and with a client's own ``Authorization``
    header it made aiohttp raise (a 500 on every request): refused, naming the setting and the URL without it."""
    with pytest.raises(SettingsError) as e:
        Settings.from_env({var: value})
    text = str(e.value)
    assert text.startswith(var) and "credentials" in text and "http://127.0.0.1:9/v1" in text
    assert URL_PASSWORD not in text and "proxy-user" not in text and "\n" not in text


def test_an_upstream_url_with_a_query_is_refused() -> None:
    with pytest.raises(SettingsError, match=r"^GATEWAY_GEMINI_BASE_URL \(https://g/v1\) has a query") as e:
        Settings.from_env({"GATEWAY_GEMINI_BASE_URL": f"https://g/v1?key={URL_PASSWORD}"})
    assert URL_PASSWORD not in str(e.value)


def test_settings_built_directly_refuse_credentials_too() -> None:
    """``create_app(Settings(...))`` (the demo, the tests, an embedding) has no ``from_env`` in front of it."""
    with pytest.raises(SettingsError, match=r"^GATEWAY_OPENAI_BASE_URL"):
        Settings(openai_base_url=URL_WITH_USERINFO)


def test_repr_shows_route_urls_without_user_info_or_query() -> None:
    """The startup banner prints the repr: a route URL in it is shown as ``display_url`` shows it."""
    s = Settings(routes=f"gpt-=copilot@{URL_WITH_USERINFO},x-=deepseek@https://d/v1?token={URL_PASSWORD}")
    for text in (repr(s), str(s)):
        assert URL_PASSWORD not in text and "proxy-user" not in text
        assert "routes='gpt-=copilot@http://127.0.0.1:9/v1,x-=deepseek@https://d/v1'" in text


def test_malformed_routes_do_not_echo_credentials() -> None:
    for routes in (f"gpt-=bogus@{URL_WITH_USERINFO}", f"gpt-:copilot@{URL_WITH_USERINFO}"):
        with pytest.raises(SettingsError) as e:
            Settings.from_env({"GATEWAY_ROUTES": routes})
        assert URL_PASSWORD not in str(e.value) and "GATEWAY_ROUTES" in str(e.value)


@pytest.mark.process
@pytest.mark.parametrize(("var", "value"), [("GATEWAY_OPENAI_BASE_URL", URL_WITH_USERINFO),
                                            ("GATEWAY_ROUTES", f"gpt-=copilot@{URL_WITH_USERINFO}")])
def test_serve_refuses_an_upstream_url_with_credentials_in_one_line(var: str, value: str) -> None:
    """The served gateway does not start (rather than answer 500 to every client that sends ``Authorization``):
    exit 2, one line naming the setting, the password nowhere."""
    env = {**os.environ, var: value}
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", str(free_port())], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-500:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"thinkgate: {var}") and "credentials" in lines[0], lines
    assert URL_PASSWORD not in out.stderr + out.stdout


@pytest.mark.process
def test_a_port_in_use_stops_the_server_with_one_line() -> None:
    """Issue 34 item 3: a port another process listens on was a 15-line ``OSError: [Errno 98]`` traceback."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(port)],
                             env=dict(os.environ), capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-800:]
    [line] = out.stderr.strip().splitlines()
    assert line == f"thinkgate: cannot listen on 127.0.0.1:{port}: Address already in use"

"""One frozen settings object built from ``GATEWAY_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Literal

from gateway.dialects import prices
from gateway.dialects.cloud import Auth, MissingExtra
from gateway.dialects.gemini.parts import BYPASS_SIGNATURE, BYPASS_VALUES
from gateway.dialects.registry import CLOUD
from gateway.dialects.routing import FLAVORS, RouteError, Router, parse_routes
from gateway.dialects.urls import credentials_problem, display_url, redact_urls
from state.factory import check_store_url

DEFAULT_SECRET = "thinkgate-dev-secret"
DEFAULT_METRICS_TENANTS = 20  # tenant prefixes each worker names in gateway_tokens_total (metrics.TenantLabels)
MIN_SECRET_BYTES = 32  # an HMAC key: a short one can be guessed offline from any tenant prefix it made
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
BYPASS_OFF = "off"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


BASE_URL_FIELDS = ("anthropic_base_url", "gemini_base_url", "openai_base_url", "bedrock_base_url", "vertex_base_url")
CONTINUATIONS = frozenset({"splice", "carried_repair", "carried_sanitize"})


class SettingsError(ValueError):
    pass


# One line per setting (``thinkgate serve --help``; docs/configuration.md says more). A test checks that every
# field has one and that the listed variables are exactly the ones ``from_env`` reads.
DESCRIPTIONS: dict[str, str] = {
    "anthropic_base_url": "Anthropic upstream (claude-* models)",
    "gemini_base_url": "Gemini upstream (gemini-* models)",
    "openai_base_url": "default OpenAI-compatible upstream (every other model), with its version path; "
                       "unset: such models get 400",
    "openai_flavor": f"what that upstream is: {' | '.join(FLAVORS)}",
    "routes": "extra routes checked first: PREFIX=anthropic|gemini|openai|FLAVOR@BASE_URL|PLATFORM@LOCATION "
              "(bedrock@REGION, bedrock-converse@REGION, vertex@PROJECT/REGION), comma-separated",
    "bedrock_base_url": "Bedrock runtime endpoint instead of https://bedrock-runtime.REGION.amazonaws.com (a VPC "
                        "endpoint)",
    "vertex_base_url": "Vertex AI endpoint instead of https://REGION-aiplatform.googleapis.com (Private Service "
                       "Connect)",
    "connect_timeout_s": "upstream connect timeout, seconds (-> 502)",
    "read_timeout_s": "longest silence from the upstream while reading, seconds (-> 504)",
    "upstream_retries": "retries before the first byte (429/503/529, refused connections)",
    "upstream_retry_max_delay_s": "longest wait before one retry, seconds (a longer retry-after is relayed)",
    "max_body_bytes": "larger request bodies get 413",
    "request_memory_mb": "the memory one request may cost, estimated from its body before it is decoded (bytes and "
                         "JSON objects); more gets 413 (0: no bound)",
    "offload_body_kb": "request bodies at least this large (KiB) are parsed, repaired and encoded off the event loop, "
                       "one at a time per worker, unless they replay a kept body with less than this new (0: never)",
    "body_timeout_s": "seconds a client may take to send its request body (-> 408)",
    "keep_alive_timeout_s": "idle client connections are closed after this many seconds",
    "redis_url": "redis://, rediss://, redis+cluster://, redis+sentinel://; unset: embedded store (one process)",
    "secret": "HMAC key of tenant prefixes, at least 32 bytes; required with GATEWAY_REDIS_URL",
    "previous_secret": "the secret before a rotation (its conversations continue)",
    "state_ttl_seconds": "lifetime of conversation records, refreshed on use",
    "state_max_turns": "turns kept per conversation (oldest trimmed)",
    "tenant_storage_mb": "MiB one tenant may record per TTL window; 0 = no budget",
    "max_prompt_kb": "KiB (stored) above which a turn is recorded without its prompt; 0 = no cap",
    "store_timeout_ms": "time Redis has to answer one round trip, ms",
    "decoded_turn_cache": "decoded stored turns each worker keeps (LRU); 0 = off",
    "load_cache_mb": "MiB of loaded conversations each worker keeps (LRU); 0 = off",
    "replay_memo_mb": "MiB of decoded histories each worker keeps (LRU); 0 = off",
    "metrics_tenants": "tenant prefixes each worker names in gateway_tokens_total (the rest: other); 0 = none",
    "keep_prefix": "models that bind thinking to its prefix: resend the recorded system prompt and tools, the "
                   "client's changes as a mid-conversation system message and tool_addition/tool_removal "
                   "(false: opt into drop_block)",
    "continuations_off": f"benchmarks only: switch off {', '.join(sorted(CONTINUATIONS))} (comma-separated)",
    "state_machine_enabled": "record turns and repair replays from the records (the sanitizer always runs)",
    "stateless_start": "report ready before the store (GATEWAY_REDIS_URL) was ever reached, serving statelessly "
                       "until it is (false: not ready until then)",
    "unverifiable_thinking": "drop | text: what happens to thinking that cannot be verified",
    "fix_thinking_params": "repair request parameters that thinking forbids",
    "drop_unsupported_params": "false: 400 for chat parameters the upstream cannot honour; true: drop them",
    "gemini_signature_bypass": f"dummy Gemini thoughtSignature: {' | '.join(BYPASS_VALUES)} | {BYPASS_OFF}",
    "log_level": " | ".join(LOG_LEVELS),
    "log_format": "text | json (one JSON object per line)",
    "drain_timeout_s": "after SIGTERM: longest wait for requests in flight, seconds",
    "drain_delay_s": "after SIGTERM: seconds to keep accepting (readiness false) before closing the listener",
    "upstream_api_keys": "the upstream credentials requests with a gateway key are served with: NAME=KEY, "
                         "comma-separated (NAME: anthropic, gemini, openai or a route's flavor); from a Secret",
    "require_gateway_keys": "refuse requests that carry no gateway key (401)",
    "keys_required_for": "upstreams whose routes serve requests with a gateway key only (comma-separated names as the "
                         "startup line lists them: anthropic, gemini, openai, a flavor, bedrock, vertex, ...)",
    "cloud_without_keys": "serve cloud platform routes (bedrock@, vertex@) to requests without a gateway key: the "
                          "gateway's own cloud credential pays for anyone who reaches it",
    "admin_token": "bearer token of the admin API (/admin/keys); unset: no admin API; from a Secret",
    "metrics_token": "bearer token /metrics asks for; unset: /metrics answers anyone; from a Secret",
    "limits_fail_open": "store away: admit gateway keys this worker admitted before, without limits (false: 503)",
    "model_aliases": "model aliases, ALIAS=MODEL comma-separated (fast=claude-haiku-4-5): routed and sent as MODEL",
    "fallbacks": "fallback models, MODEL=FALLBACK comma-separated (a chain: FALLBACK may have its own): a request "
                 "whose upstream answers 429, 5xx or overloaded before the first byte goes to FALLBACK",
    "prices_file": "a JSON price table (USD per million tokens by model pattern) before the shipped one; budgets and "
                   "spend use it",
}


@dataclass(frozen=True, slots=True)
class Settings:
    anthropic_base_url: str = "https://api.anthropic.com"
    gemini_base_url: str = "https://generativelanguage.googleapis.com"
    openai_base_url: str | None = None     # the default OpenAI-compatible upstream (unset: none)
    openai_flavor: str = "generic"         # generic | openrouter | copilot | deepseek
    routes: str = ""                       # extra routes, see gateway.dialects.routing.parse_routes
    bedrock_base_url: str | None = None    # the cloud platforms' endpoints (unset: their public ones)
    vertex_base_url: str | None = None
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0          # idle time between upstream bytes
    upstream_retries: int = 0              # retries before the first byte (429/503/529, refused);
    # gateway.transport.upstream
    upstream_retry_max_delay_s: float = 10.0  # longest wait before one retry (a longer retry-after is relayed)
    max_body_bytes: int = 32 * 1024 * 1024
    request_memory_mb: int = 512           # estimated peak of one request (``request_cost``): more is a 413
    offload_body_kb: int = 256             # bodies this large are worked on in a thread: /healthz answers meanwhile
    body_timeout_s: float = 30.0           # longest a client may take to send its request body (-> 408)
    keep_alive_timeout_s: float = 75.0     # idle client connection closed after; also the time to send headers
    redis_url: str | None = field(default=None, repr=False)  # may carry a password
    secret: str = field(default=DEFAULT_SECRET, repr=False)
    previous_secret: str | None = field(default=None, repr=False)  # accepted during a secret rotation
    state_ttl_seconds: int = 86400
    state_max_turns: int = 1000
    tenant_storage_mb: int = 256           # MiB one tenant may record per state TTL window; 0 = no budget
    max_prompt_kb: int = 1024              # KiB (stored): a larger turn record is stored without its prompt; 0 = no cap
    store_timeout_ms: int = 250            # Redis's time to answer a round trip once written (state.redis_store)
    decoded_turn_cache: int = 2048         # decoded stored turns per worker (the store's, deps.WorkerCaches); 0 = off
    load_cache_mb: int = 32                # MiB (stored) of loaded conversations per worker (state.convcache); 0 = off
    replay_memo_mb: int = 32               # MiB (memory) of decoded histories per worker
    # (gateway.continuation.replay_memo); 0 = off
    # continuations switched off, for the benchmarks (bench/continuations.py): splice, carried_repair, carried_sanitize
    continuations_off: frozenset[str] = frozenset()
    state_machine_enabled: bool = True
    unverifiable_thinking: Literal["drop", "text"] = "drop"
    fix_thinking_params: bool = True
    # binding models: keep the recorded prefix (mid-conversation system message, tool_addition / tool_removal);
    # false: a changed prefix opts the request into drop_block instead (gateway.pipeline.repair.prefix)
    keep_prefix: bool = True
    stateless_start: bool = False  # ready before the store was ever reached (false: /readyz 503 until it is)
    drop_unsupported_params: bool = False  # chat completions parameters an upstream cannot honour: 400, or dropped
    gemini_signature_bypass: str = BYPASS_SIGNATURE  # a documented bypass value, or "off"
    metrics_tenants: int = DEFAULT_METRICS_TENANTS  # the rest are "other" in gateway_tokens_total; 0 = all "other"
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "text"
    drain_timeout_s: float = 30.0  # after SIGTERM: longest wait for requests in flight
    drain_delay_s: float = 0.0     # after SIGTERM: keep accepting (readiness false) before closing the listener
    # The team gateway (gateway.access): the credentials thinkgate holds per upstream, used for requests that carry
    # a gateway key ("NAME=KEY,...": NAME an upstream: anthropic, gemini, openai or a route's flavor)
    upstream_api_keys: str = field(default="", repr=False)
    require_gateway_keys: bool = False  # refuse requests without a gateway key (the client's own key is not used)
    cloud_without_keys: bool = False    # cloud routes serve requests without a gateway key (default: 401)
    keys_required_for: frozenset[str] = frozenset()  # upstreams (routes) that serve gateway keys only
    admin_token: str | None = field(default=None, repr=False)  # /admin/* (unset: no admin API)
    metrics_token: str | None = field(default=None, repr=False)  # /metrics wants it as a bearer (unset: open)
    limits_fail_open: bool = False  # store away: admit the keys this worker admitted before (false: 503)
    model_aliases: str = ""  # "ALIAS=MODEL,...": a request for ALIAS is routed, sent and recorded as MODEL
    prices_file: str | None = None  # a JSON price table before the shipped one (gateway.dialects.prices)
    fallbacks: str = ""  # "MODEL=FALLBACK,...": upstream failed before the first byte: the request goes as FALLBACK

    @staticmethod
    def env_name(field_name: str) -> str:
        """The environment variable a field is read from (``redis_url`` -> ``GATEWAY_REDIS_URL``)."""
        return "GATEWAY_" + field_name.upper()

    @classmethod
    def reference(cls) -> list[tuple[str, str, str]]:
        """(variable, default, meaning) for every setting, in field order: what ``thinkgate serve --help`` lists."""
        out = []
        for f in fields(cls):
            default = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
            if f.name == "secret":
                shown = "built-in dev value"
            elif default is None or default == "" or default == frozenset():
                shown = "unset"
            elif isinstance(default, bool):
                shown = str(default).lower()
            else:
                shown = str(default)
            out.append((cls.env_name(f.name), shown, DESCRIPTIONS.get(f.name, "")))  # (a test: every field has one)
        return out

    def upstream_urls(self) -> dict[str, str]:
        """Upstream name -> base URL: ``anthropic`` and ``gemini`` always, ``openai`` when
        ``GATEWAY_OPENAI_BASE_URL`` is set, one more per OpenAI-compatible flavor ``GATEWAY_ROUTES`` names."""
        urls = {"anthropic": self.anthropic_base_url, "gemini": self.gemini_base_url}
        if self.openai_base_url:
            urls["openai"] = self.openai_base_url
        for name, route in self.router().named_upstreams().items():
            cloud = CLOUD.get(name) if route.location else None
            urls[name] = (cloud.base_url(route.location, getattr(self, cloud.endpoint_setting)) if cloud is not None
                          else route.base_url or "")
        return urls

    def upstream_auths(self) -> dict[str, Auth]:
        """The request signers of the cloud platforms the routes name (upstream name -> signer). A platform whose
        credential library is not installed is a ``SettingsError``."""
        out: dict[str, Auth] = {}
        for name, route in self.router().named_upstreams().items():
            if route.location and name in CLOUD:
                try:
                    out[name] = CLOUD[name].auth(route.location)
                except MissingExtra as e:
                    raise SettingsError(str(e)) from None
        return out

    def __post_init__(self) -> None:
        """An upstream base URL with user info (or a query) is refused however the settings are built: it would
        send a second credential for every tenant, or make the upstream call fail on the client's own
        ``Authorization`` header (``gateway.dialects.urls``). ``GATEWAY_ROUTES``'s URLs are checked by
        ``parse_routes``."""
        for name in BASE_URL_FIELDS:
            url = getattr(self, name)
            if url and (problem := credentials_problem(url)):
                raise SettingsError(f"{self.env_name(name)} ({display_url(url)}) {problem}")

    def __repr__(self) -> str:  # secrets never appear, whatever dataclass does; URLs without user info or query
        shown = ", ".join(f"{f.name}={_shown(getattr(self, f.name))!r}" for f in fields(self) if f.repr)
        redis = "set" if self.redis_url else "unset"
        prev = ", previous_secret=<redacted>" if self.previous_secret else ""
        return f"Settings({shown}, redis_url=<{redis}>, secret=<redacted>{prev})"

    __str__ = __repr__

    @property
    def gemini_bypass(self) -> str | None:
        """The value signing a Gemini call no record vouches for; None: degrade instead (``sanitize``)."""
        return None if self.gemini_signature_bypass == BYPASS_OFF else self.gemini_signature_bypass

    def router(self) -> Router:
        return Router(parse_routes(self.routes), self.openai_flavor)

    def check_production(self) -> None:
        """Refuse the development default secret once state is shared (a Redis URL is set): tenant
        prefixes would be guessable by anyone who knows the default."""
        if self.redis_url and self.secret == DEFAULT_SECRET:
            raise SettingsError("GATEWAY_SECRET must be set to a private value when GATEWAY_REDIS_URL is set "
                                "(the built-in default is only for the embedded, single-process store)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        get = lambda name: env.get("GATEWAY_" + name)  # noqa: E731
        kw: dict[str, object] = {}
        _str(kw, "anthropic_base_url", get("ANTHROPIC_BASE_URL"))
        _str(kw, "gemini_base_url", get("GEMINI_BASE_URL"))
        _str(kw, "openai_base_url", get("OPENAI_BASE_URL"))
        _str(kw, "bedrock_base_url", get("BEDROCK_BASE_URL"))
        _str(kw, "vertex_base_url", get("VERTEX_BASE_URL"))
        if (v := get("OPENAI_FLAVOR")) and v not in FLAVORS:
            raise SettingsError(f"GATEWAY_OPENAI_FLAVOR must be one of {', '.join(FLAVORS)}")
        _str(kw, "openai_flavor", v)
        if v := get("ROUTES"):
            try:
                parse_routes(v)
            except RouteError as e:
                raise SettingsError(str(e)) from None
            kw["routes"] = v
        _float(kw, "connect_timeout_s", get("CONNECT_TIMEOUT_S"))
        _float(kw, "read_timeout_s", get("READ_TIMEOUT_S"))
        _int(kw, "upstream_retries", get("UPSTREAM_RETRIES"))
        _float(kw, "upstream_retry_max_delay_s", get("UPSTREAM_RETRY_MAX_DELAY_S"))
        _int(kw, "max_body_bytes", get("MAX_BODY_BYTES"))
        _int(kw, "offload_body_kb", get("OFFLOAD_BODY_KB"))
        _int(kw, "request_memory_mb", get("REQUEST_MEMORY_MB"))
        _float(kw, "body_timeout_s", get("BODY_TIMEOUT_S"))
        _float(kw, "keep_alive_timeout_s", get("KEEP_ALIVE_TIMEOUT_S"))
        for name in ("body_timeout_s", "keep_alive_timeout_s"):  # 0 would refuse or drop every client at once
            if name in kw and not float(kw[name]) > 0:  # type: ignore[arg-type]
                raise SettingsError(f"GATEWAY_{name.upper()} must be a number of seconds above 0")
        _str(kw, "redis_url", get("REDIS_URL"))
        if kw.get("redis_url"):
            try:
                check_store_url(str(kw["redis_url"]))
            except ValueError as e:  # one line at startup, not a traceback from the first worker
                raise SettingsError(f"GATEWAY_REDIS_URL: {e}") from None
        if (v := get("SECRET")) and v != DEFAULT_SECRET and len(v.encode()) < MIN_SECRET_BYTES:
            raise SettingsError(f"GATEWAY_SECRET must be at least {MIN_SECRET_BYTES} bytes (it keys every tenant "
                                "prefix; e.g. openssl rand -hex 32)")
        _str(kw, "secret", v)
        _str(kw, "previous_secret", get("PREVIOUS_SECRET"))
        _int(kw, "state_ttl_seconds", get("STATE_TTL_SECONDS"))
        _int(kw, "state_max_turns", get("STATE_MAX_TURNS"))
        _int(kw, "tenant_storage_mb", get("TENANT_STORAGE_MB"))
        _int(kw, "max_prompt_kb", get("MAX_PROMPT_KB"))
        _int(kw, "store_timeout_ms", get("STORE_TIMEOUT_MS"))
        _int(kw, "decoded_turn_cache", get("DECODED_TURN_CACHE"))
        _int(kw, "load_cache_mb", get("LOAD_CACHE_MB"))
        _int(kw, "replay_memo_mb", get("REPLAY_MEMO_MB"))
        if v := get("CONTINUATIONS_OFF"):
            off = frozenset(x.strip() for x in v.split(",") if x.strip())
            if off - CONTINUATIONS:
                raise SettingsError(f"GATEWAY_CONTINUATIONS_OFF: one or more of {', '.join(sorted(CONTINUATIONS))}")
            kw["continuations_off"] = off
        _bool(kw, "state_machine_enabled", get("STATE_MACHINE_ENABLED"))
        v = get("UNVERIFIABLE_THINKING")
        if v is not None:
            if v not in ("drop", "text"):
                raise SettingsError("GATEWAY_UNVERIFIABLE_THINKING must be 'drop' or 'text'")
            kw["unverifiable_thinking"] = v
        _bool(kw, "fix_thinking_params", get("FIX_THINKING_PARAMS"))
        _bool(kw, "keep_prefix", get("KEEP_PREFIX"))
        _bool(kw, "stateless_start", get("STATELESS_START"))
        _bool(kw, "drop_unsupported_params", get("DROP_UNSUPPORTED_PARAMS"))
        if (v := get("GEMINI_SIGNATURE_BYPASS")) and v not in (*BYPASS_VALUES, BYPASS_OFF):
            raise SettingsError(f"GATEWAY_GEMINI_SIGNATURE_BYPASS must be one of {', '.join(BYPASS_VALUES)} "
                                f"(the documented bypass values) or {BYPASS_OFF}")
        _str(kw, "gemini_signature_bypass", v)
        _int(kw, "metrics_tenants", get("METRICS_TENANTS"))
        if int(kw.get("metrics_tenants", 0)) < 0:  # type: ignore[call-overload]
            raise SettingsError("GATEWAY_METRICS_TENANTS must be 0 or more")
        if v := (get("LOG_LEVEL") or "").strip():
            if v.upper() not in LOG_LEVELS:
                raise SettingsError(f"GATEWAY_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
            kw["log_level"] = v.upper()
        if (v := get("LOG_FORMAT")) is not None and v not in ("json", "text", ""):
            raise SettingsError("GATEWAY_LOG_FORMAT must be 'json' or 'text'")
        _str(kw, "log_format", v)
        _float(kw, "drain_timeout_s", get("DRAIN_TIMEOUT_S"))
        _float(kw, "drain_delay_s", get("DRAIN_DELAY_S"))
        _pairs(kw, "upstream_api_keys", get("UPSTREAM_API_KEYS"))
        _bool(kw, "require_gateway_keys", get("REQUIRE_GATEWAY_KEYS"))
        _bool(kw, "cloud_without_keys", get("CLOUD_WITHOUT_KEYS"))
        if v := get("KEYS_REQUIRED_FOR"):
            kw["keys_required_for"] = frozenset(x.strip() for x in v.split(",") if x.strip())
        for name, v in (("admin_token", get("ADMIN_TOKEN")), ("metrics_token", get("METRICS_TOKEN"))):
            if v and len(v) < MIN_TOKEN_CHARS:
                raise SettingsError(f"GATEWAY_{name.upper()} must be at least {MIN_TOKEN_CHARS} characters")
            _str(kw, name, v)
        _bool(kw, "limits_fail_open", get("LIMITS_FAIL_OPEN"))
        _pairs(kw, "model_aliases", get("MODEL_ALIASES"))
        _pairs(kw, "fallbacks", get("FALLBACKS"))
        if v := get("PRICES_FILE"):
            try:
                prices.load(v)
            except (OSError, ValueError) as e:
                raise SettingsError(f"GATEWAY_PRICES_FILE: {e}") from None
            kw["prices_file"] = v
        return cls(**kw)  # type: ignore[arg-type]

    def fallback_chains(self) -> dict[str, str]:
        """Model -> the model its request goes to when its upstream fails before the first byte."""
        return pairs(self.fallbacks) if self.fallbacks else {}

    def aliases(self) -> dict[str, str]:
        """Alias -> the model it stands for (``GATEWAY_MODEL_ALIASES``)."""
        return pairs(self.model_aliases) if self.model_aliases else {}

    def upstream_key(self, upstream: str) -> str | None:
        """The credential thinkgate holds for ``upstream`` (None: none configured)."""
        return pairs(self.upstream_api_keys).get(upstream) if self.upstream_api_keys else None


MIN_TOKEN_CHARS = 16


def pairs(spec: str) -> dict[str, str]:
    """``NAME=VALUE,...`` -> {name: value}; a malformed entry is a ValueError naming its position, never its value."""
    out: dict[str, str] = {}
    for n, entry in enumerate((e.strip() for e in spec.split(",")), 1):
        name, sep, key = (p.strip() for p in entry.partition("="))
        if not entry:
            continue
        if not sep or not name or not key or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"entry {n} is not NAME=VALUE")
        out[name] = key
    return out


def _shown(value: object) -> object:
    """A setting's value as the repr shows it: every URL in a string through ``display_url``."""
    return redact_urls(value) if isinstance(value, str) else value


def _str(kw: dict[str, object], name: str, v: str | None) -> None:
    if v is not None and v != "":
        kw[name] = v


def _int(kw: dict[str, object], name: str, v: str | None) -> None:
    if v:
        try:
            kw[name] = int(v)
        except ValueError as e:
            raise SettingsError(f"GATEWAY_{name.upper()} must be an integer") from e


def _float(kw: dict[str, object], name: str, v: str | None) -> None:
    if v:
        try:
            kw[name] = float(v)
        except ValueError as e:
            raise SettingsError(f"GATEWAY_{name.upper()} must be a number") from e


def _pairs(kw: dict[str, object], name: str, v: str | None) -> None:
    """A ``NAME=VALUE,...`` setting, checked (``pairs``)."""
    if v:
        try:
            pairs(v)
        except ValueError as e:
            raise SettingsError(f"GATEWAY_{name.upper()}: {e}") from None
        kw[name] = v


def _bool(kw: dict[str, object], name: str, v: str | None) -> None:
    if v:
        low = v.strip().lower()
        if low not in _TRUE | _FALSE:
            raise SettingsError(f"GATEWAY_{name.upper()} must be true or false")
        kw[name] = low in _TRUE

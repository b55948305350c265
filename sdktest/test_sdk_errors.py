"""The error table: every error code the SDK stack can be made to answer,
through the official openai and anthropic SDKs at their DEFAULT settings
(max_retries=2, Retry-After honoured), with the attempts each SDK made and
the wall time to the answer.

A refusal no retry can fix must cost one attempt: Sluice sends
x-should-retry: false on it, which both SDKs obey before their status rules
(they retry 408, 409, 429 and 5xx otherwise), and so does a refusal whose
Retry-After is over a minute. A refusal a retry may fix soon (429
rate_limit_exceeded with a short Retry-After) is retried, as the SDKs'
authors intend.

Started by sdk_integration_test.go (the "error table" subtest, after the
others: the limited and per-day keys may be spent already, so each case
that needs a spent budget first spends it and ignores that answer).
Environment: SLUICE_BASE_URL, SLUICE_API_KEY, SLUICE_LIMITED_KEY,
SLUICE_DISABLED_KEY, SLUICE_PAUSED_KEY, SLUICE_QUOTA_KEY, SLUICE_BURST_KEY and the
entitlement keys (SLUICE_BATCH_KEY, SLUICE_EXPIRED_KEY).

pytest -s prints the table (docs/gateway.md keeps a copy); the attempts,
statuses, codes and x-should-retry are asserted, the times only printed.
"""
import os
import time

import anthropic
import openai

BASE = os.environ["SLUICE_BASE_URL"]
KEY = os.environ["SLUICE_API_KEY"]
ENV = os.environ
MESSAGES = [{"role": "user", "content": "Say hello to Sluice."}]


def client(sdk, key=KEY, **kw):
    """A client of sdk at its default retry settings that records every
    HTTP request it sends."""
    sent = []
    http = sdk.DefaultHttpxClient(event_hooks={"request": [lambda r: sent.append(r.url.path)]})
    if sdk is openai:
        return openai.OpenAI(base_url=BASE + "/v1", api_key=key, http_client=http, **kw), sent
    return anthropic.Anthropic(base_url=BASE, api_key=key, http_client=http, **kw), sent


def quietly(f):
    try:
        f()
    except (openai.APIError, anthropic.APIError):
        pass


def chat(c, **kw):
    args = dict(model="gpt-4o-mini", messages=MESSAGES, max_tokens=8)
    args.update(kw)
    return lambda: c.chat.completions.create(**args)


def msg(c, **kw):
    args = dict(model="claude-sonnet-4-5", messages=MESSAGES, max_tokens=8)
    args.update(kw)
    return lambda: c.messages.create(**args)


def cases():
    """(sdk, name, expected status, expected code, attempts, setup, call):
    setup(client) spends what the case needs spent; call(client) returns
    the request to measure."""
    out = []
    o, a = openai, anthropic

    def add(sdk, name, status, code, attempts, call, key=KEY, setup=None, **kw):
        out.append((sdk, name, status, code, attempts, key, kw, setup, call))

    add(o, "max_tokens: -1", 400, "invalid_value", 1, lambda c: chat(c, max_tokens=-1))
    add(o, "X-Sluice-Priority: 101", 400, "invalid_header", 1,
        lambda c: chat(c, extra_headers={"X-Sluice-Priority": "101"}))
    add(o, "embeddings on a Claude model", 400, "unsupported_api", 1,
        lambda c: lambda: c.embeddings.create(model="claude-sonnet-4-5", input="hi"))
    add(o, "unknown key", 401, "invalid_api_key", 1, lambda c: chat(c), key="sk-nope")
    add(a, "unknown key", 401, "invalid_api_key", 1, lambda c: msg(c), key="sk-nope")
    add(o, "disabled key", 401, "api_key_disabled", 1, lambda c: chat(c), key=ENV["SLUICE_DISABLED_KEY"])
    add(o, "paused key", 403, "paused", 1, lambda c: chat(c), key=ENV["SLUICE_PAUSED_KEY"])
    add(a, "paused key", 403, "paused", 1, lambda c: msg(c), key=ENV["SLUICE_PAUSED_KEY"])
    add(o, "unknown model", 404, "model_not_found", 1, lambda c: chat(c, model="gpt-9"))
    add(a, "unknown model", 404, "model_not_found", 1, lambda c: msg(c, model="claude-9"))
    add(o, "unknown path", 404, "not_found", 1, lambda c: lambda: c.get("/nothing", cast_to=object))
    add(o, "GET on a POST path", 405, "method_not_allowed", 1,
        lambda c: lambda: c.get("/chat/completions", cast_to=object))
    add(o, "Idempotency-Key reused", 409, "idempotency_key_reused", 1,
        lambda c: chat(c, messages=[{"role": "user", "content": "two"}], extra_headers={"Idempotency-Key": "sdk-errors-1"}),
        setup=lambda c: chat(c, messages=[{"role": "user", "content": "one"}], extra_headers={"Idempotency-Key": "sdk-errors-1"})())
    add(o, "body over 10 MiB", 413, "body_too_large", 1,
        lambda c: chat(c, messages=[{"role": "user", "content": "x" * (10 << 20)}]))
    add(o, "above the provider's TPM", 413, "request_too_large", 1, lambda c: chat(c, max_tokens=1_000_000))
    add(o, "Sluice daily quota spent", 429, "insufficient_quota", 1, lambda c: chat(c),
        key=ENV["SLUICE_QUOTA_KEY"], setup=lambda c: quietly(chat(c)))
    add(o, "Gemini per-day quota spent", 429, "insufficient_quota", 1, lambda c: chat(c, model="gemini-daily"),
        setup=lambda c: quietly(chat(c, model="gemini-daily")))
    add(a, "Anthropic per-day quota spent", 429, "insufficient_quota", 1, lambda c: msg(c, model="claude-daily"),
        setup=lambda c: quietly(msg(c, model="claude-daily")))
    # Retry-After about an hour: longer than an SDK should sleep (the
    # Anthropic SDK sleeps for any Retry-After), so x-should-retry: false.
    add(o, "key's hourly budget spent, Retry-After 3600 s", 429, "rate_limit_exceeded", 1, lambda c: chat(c),
        key=ENV["SLUICE_LIMITED_KEY"], setup=lambda c: quietly(chat(c)))
    add(a, "key's hourly budget spent, Retry-After 3600 s", 429, "rate_limit_exceeded", 1, lambda c: msg(c),
        key=ENV["SLUICE_LIMITED_KEY"], setup=lambda c: quietly(msg(c)))
    # One request per 2 s: a retry after the Retry-After succeeds.
    add(o, "key's 2 s budget spent: retried, then served", 200, "", (2, 3), lambda c: chat(c),
        key=ENV["SLUICE_BURST_KEY"], setup=lambda c: quietly(chat(c)))
    add(a, "key's 2 s budget spent: retried, then served", 200, "", (2, 3), lambda c: msg(c),
        key=ENV["SLUICE_BURST_KEY"], setup=lambda c: quietly(msg(c)))
    if "SLUICE_BATCH_KEY" in ENV:
        batch = ENV["SLUICE_BATCH_KEY"]
        add(o, "class outside the key's entitlement", 403, "class_not_entitled", 1,
            lambda c: chat(c, extra_headers={"X-Sluice-Class": "interactive"}), key=batch)
        add(o, "priority above the key's maximum", 403, "priority_not_entitled", 1,
            lambda c: chat(c, extra_headers={"X-Sluice-Priority": "100"}), key=batch)
        add(o, "model outside the key's allowlist", 403, "model_not_allowed", 1,
            lambda c: chat(c, model="o4-mini"), key=batch)
        add(a, "class outside the key's entitlement", 403, "class_not_entitled", 1,
            lambda c: msg(c, extra_headers={"X-Sluice-Class": "interactive"}), key=batch)
        add(o, "expired key", 401, "invalid_api_key", 1, lambda c: chat(c), key=ENV["SLUICE_EXPIRED_KEY"])
    return out


def body_of(sdk, e):
    b = e.body if isinstance(e.body, dict) else {}
    if sdk is anthropic or "error" in b:
        b = b.get("error", b)
    return b


def test_error_table():
    rows, problems = [], []
    progress = open(ENV["SLUICE_SDK_PROGRESS"], "a") if ENV.get("SLUICE_SDK_PROGRESS") else None
    for sdk, name, status, code, attempts, key, kw, setup, call in cases():
        if progress:
            print(f"{time.strftime('%X')} {sdk.__name__} {name}", file=progress, flush=True)
        c, sent = client(sdk, key, **kw)
        if setup:
            setup(c)
        sent.clear()
        t0 = time.monotonic()
        got_status, got_code, retry_hdr = 200, "", ""
        try:
            call(c)()
        except sdk.APIStatusError as e:
            got_status, got_code = e.status_code, body_of(sdk, e).get("code", "")
            retry_hdr = e.response.headers.get("x-should-retry", "")
            rid = e.response.headers.get("x-sluice-request-id", "")
            if not rid:
                problems.append(f"{sdk.__name__} {name}: no X-Sluice-Request-Id")
        wall = time.monotonic() - t0
        rows.append(f"| {sdk.__name__} {sdk.__version__} | {name} | {got_status} `{got_code}` | "
                    f"{retry_hdr or '-'} | {len(sent)} | {wall:.2f} |")
        if (got_status, got_code) != (status, code):
            problems.append(f"{sdk.__name__} {name}: got {got_status} {got_code!r}, want {status} {code!r}")
        if len(sent) not in (attempts if isinstance(attempts, tuple) else (attempts,)):
            problems.append(f"{sdk.__name__} {name}: {len(sent)} attempts, want {attempts}")
        if attempts == 1 and retry_hdr != "false":
            problems.append(f"{sdk.__name__} {name}: x-should-retry {retry_hdr!r}, want false")
    # Lower-case auth scheme (RFC 9110 §11.1): accepted, one attempt.
    c, sent = client(openai, "unused", default_headers={"Authorization": "bearer " + KEY})
    t0 = time.monotonic()
    c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=8)
    rows.append(f"| openai {openai.__version__} | `Authorization: bearer …` (lower case) | 200 | - | {len(sent)} | "
                f"{time.monotonic() - t0:.2f} |")
    print("\n| SDK | case | answer | x-should-retry | attempts | wall s |\n|---|---|---|---|---|---|")
    print("\n".join(rows))
    assert not problems, "\n".join(problems)

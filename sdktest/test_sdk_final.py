"""The official SDKs at their DEFAULT settings (max_retries=2, Retry-After
honoured) against provider errors that can never succeed: each must reach
the client without Retry-After, as a status the SDKs do not retry (a 4xx
other than 408, 409 and 429) or with x-should-retry: false, which they obey
before their status rules (a spent quota is OpenAI's 429
insufficient_quota), so the SDK makes exactly one attempt.

Started by sdk_integration_test.go. Environment: SLUICE_BASE_URL,
SLUICE_API_KEY, SLUICE_SIM_URL (the provider simulator behind the gateway,
whose /sim/stats shows what reached the provider). The stack routes
gemini-daily and claude-daily to simulator models allowing one request per
day, each in a scope of its own.

Each test prints its attempt count and the time to the answer (pytest -s);
only the count is asserted.
"""
import json
import os
import time
import urllib.request

import anthropic
import openai
import pytest

BASE = os.environ["SLUICE_BASE_URL"]
KEY = os.environ["SLUICE_API_KEY"]
SIM = os.environ["SLUICE_SIM_URL"]
MESSAGES = [{"role": "user", "content": "Say hello to Sluice."}]
SDK_RETRIED = {408, 409, 429}


def counting(sdk):
    """A client of sdk (openai or anthropic) at its default settings whose
    HTTP client records every request the SDK sends."""
    sent = []
    http = sdk.DefaultHttpxClient(event_hooks={"request": [lambda r: sent.append(r.url.path)]})
    if sdk is openai:
        return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, http_client=http), sent
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, http_client=http), sent


def sim_stats(provider):
    with urllib.request.urlopen(SIM + "/sim/stats") as r:
        return json.load(r)["providers"][provider]


def attempt_once(name, call, error, sent):
    t0 = time.monotonic()
    with pytest.raises(error) as ei:
        call()
    print(f"\n{name}: {len(sent)} attempt(s), answered in {time.monotonic() - t0:.3f} s")
    e = ei.value
    assert len(sent) == 1, f"the SDK sent {len(sent)} requests: {sent}"
    assert 400 <= e.status_code < 500
    assert e.status_code not in SDK_RETRIED or e.response.headers.get("x-should-retry") == "false"
    assert "retry-after" not in e.response.headers and "retry-after-ms" not in e.response.headers
    return e


def test_request_above_the_providers_limit_is_not_retried():
    # The simulator's OpenAI TPM is 150k and OpenAI reserves max_tokens: a
    # "Request too large" 429 with Retry-After: 60 upstream.
    c, sent = counting(openai)
    before = sim_stats("openai")["rate_limited_by"].get("request_too_large", 0)
    e = attempt_once("request above the TPM limit",
                     lambda: c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=1_000_000),
                     openai.APIStatusError, sent)
    assert e.status_code == 413 and e.body["code"] == "request_too_large"
    assert e.body["sluice"]["gateway_decision"] == "admitted_then_provider_rejected"
    assert "retry_after_ms" not in e.body["sluice"]
    # The gateway did not retry upstream either.
    assert sim_stats("openai")["rate_limited_by"]["request_too_large"] == before + 1


def test_gemini_per_day_quota_is_not_retried():
    c, sent = counting(openai)
    c.chat.completions.create(model="gemini-daily", messages=MESSAGES, max_tokens=8)  # the day's one request
    sent.clear()
    e = attempt_once("Gemini per-day quota",
                     lambda: c.chat.completions.create(model="gemini-daily", messages=MESSAGES, max_tokens=8),
                     openai.RateLimitError, sent)
    assert e.status_code == 429 and e.body["code"] == "insufficient_quota"
    assert e.body["sluice"]["type"] == "provider_limit"


def test_anthropic_per_day_quota_is_not_retried():
    c, sent = counting(anthropic)
    c.messages.create(model="claude-daily", max_tokens=8, messages=MESSAGES)  # the day's one request
    sent.clear()
    e = attempt_once("Anthropic per-day quota",
                     lambda: c.messages.create(model="claude-daily", max_tokens=8, messages=MESSAGES),
                     anthropic.RateLimitError, sent)
    assert e.status_code == 429 and e.body["error"]["code"] == "insufficient_quota"
    # Now the ledger knows the quota is spent: the next request is refused
    # locally, with the same contract, and never reaches the provider.
    requests = sim_stats("anthropic")["requests"]
    sent.clear()
    e = attempt_once("Anthropic per-day quota, known to the ledger",
                     lambda: c.messages.create(model="claude-daily", max_tokens=8, messages=MESSAGES),
                     anthropic.RateLimitError, sent)
    assert e.body["error"]["code"] == "insufficient_quota"
    assert sim_stats("anthropic")["requests"] == requests
